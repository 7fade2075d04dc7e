"""TLS session resumption on the lean path (``letagents_trio._http._resume``), and the cap on
handshakes under way at once, over loopback.

The room is ``trio.SSLStream`` with a certificate made for the test
(:func:`.tiny_room.self_signed`), which sends its session tickets after each
full handshake and ``hello`` once the handshake is done; the client is the
lean path's :class:`~letagents_trio._http.NetworkOpener` or
:func:`~letagents_trio._http._tls.open_tls`. The real clock, bounded by
``trio.fail_after``.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.testing

from letagents_trio._http import NetworkOpener, Origin, _resume
from letagents_trio._http._resume import TLSSessions
from letagents_trio._http._tls import TLSStream, open_tls

from .tiny_room import self_signed

if TYPE_CHECKING:
    from pathlib import Path


@attrs.define(eq=False)
class TicketRoom:
    """A TLS listener on 127.0.0.1: each connection's handshake, then ``hello``, held open."""

    port: int
    # The context the next connections are served with (a new one: new ticket keys).
    context: ssl.SSLContext
    handshakes: int = 0


@asynccontextmanager
async def ticket_room(server_tls: ssl.SSLContext) -> AsyncIterator[TicketRoom]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    [listener] = listeners
    room = TicketRoom(listener.socket.getsockname()[1], server_tls)

    async def serve(accepted: trio.SocketStream) -> None:
        theirs = trio.SSLStream(accepted, room.context, server_side=True)
        try:
            await theirs.do_handshake()
            room.handshakes += 1
            await theirs.send_all(b"hello")
            await trio.sleep_forever()
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(theirs)

    async with listener, trio.open_nursery() as nursery:

        async def accept_all() -> None:
            while True:
                nursery.start_soon(serve, await listener.accept())

        nursery.start_soon(accept_all)
        try:
            yield room
        finally:
            nursery.cancel_scope.cancel(reason="the test is done")


def tls12(context: ssl.SSLContext) -> None:
    context.maximum_version = ssl.TLSVersion.TLSv1_2


async def _read_hello(stream: trio.abc.Stream) -> None:
    assert await stream.receive_some() == b"hello"


def _resumed(stream: trio.abc.Stream) -> bool:
    assert isinstance(stream, TLSStream)
    return stream._ssl.session_reused


@pytest.mark.parametrize("configure", [None, tls12], ids=["TLS 1.3", "TLS 1.2"])
async def test_a_second_connection_to_the_room_resumes_the_first_ones_session(
    tmp_path: Path, configure: Callable[[ssl.SSLContext], None] | None
) -> None:
    server_tls, client_tls = self_signed(tmp_path)
    if configure is not None:
        configure(server_tls)
    opener = NetworkOpener(ssl_context=client_tls)
    with trio.fail_after(10):
        async with ticket_room(server_tls) as room:
            origin = Origin("https", "127.0.0.1", room.port)
            first = await opener.open_stream(origin)
            await _read_hello(first)  # under TLS 1.3, the tickets come with it
            second = await opener.open_stream(origin)
            await _read_hello(second)
            assert (_resumed(first), _resumed(second)) == (False, True)
            for stream in (first, second):
                await stream.aclose()


async def test_a_session_is_offered_to_the_same_server_name_and_port_only(tmp_path: Path) -> None:
    """The certificate is valid for both names; a session kept for one is not offered the other."""
    server_tls, client_tls = self_signed(tmp_path)
    sessions = TLSSessions(client_tls)
    with trio.fail_after(10):
        async with ticket_room(server_tls) as room:

            async def connect(name: str) -> TLSStream:
                raw = await trio.open_tcp_stream("127.0.0.1", room.port)
                stream = await open_tls(
                    raw, client_tls, name, sessions=sessions.room(name, room.port)
                )
                await _read_hello(stream)
                return stream

            by_address = await connect("127.0.0.1")
            by_name = await connect("localhost")
            again = await connect("127.0.0.1")
            assert [_resumed(s) for s in (by_address, by_name, again)] == [False, False, True]
            assert sessions.room("127.0.0.1", room.port + 1).session is None
            for stream in (by_address, by_name, again):
                await stream.aclose()


async def test_a_session_the_room_refuses_gives_a_full_handshake_whose_session_replaces_it(
    tmp_path: Path,
) -> None:
    """The room's ticket keys changed (a restart): connected all the same, then resumed anew."""
    server_tls, client_tls = self_signed(tmp_path)
    opener = NetworkOpener(ssl_context=client_tls)
    with trio.fail_after(10):
        async with ticket_room(server_tls) as room:
            origin = Origin("https", "127.0.0.1", room.port)
            first = await opener.open_stream(origin)
            await _read_hello(first)
            kept = opener.tls_sessions.room("127.0.0.1", room.port).session
            assert kept is not None
            # The same certificate, new ticket keys.
            room.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            room.context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
            refused = await opener.open_stream(origin)
            # Offered no more; the next opening would go first, until this one's tickets come.
            assert opener.tls_sessions.room("127.0.0.1", room.port).session is None
            await _read_hello(refused)
            then = await opener.open_stream(origin)
            await _read_hello(then)
            assert [_resumed(s) for s in (first, refused, then)] == [False, False, True]
            assert opener.tls_sessions.room("127.0.0.1", room.port).session is not kept
            assert room.handshakes == 3
            for stream in (first, refused, then):
                await stream.aclose()


async def test_a_burst_to_a_new_room_makes_one_full_handshake_and_resumes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However slow a loaded host makes the first handshake (its bound: tests/test_http_resume.py).
    monkeypatch.setattr(_resume, "SESSION_WAIT", 9.0)
    server_tls, client_tls = self_signed(tmp_path)
    opener = NetworkOpener(ssl_context=client_tls)
    streams: list[trio.abc.Stream] = []
    with trio.fail_after(10):
        async with ticket_room(server_tls) as room:
            origin = Origin("https", "127.0.0.1", room.port)

            async def open_and_read() -> None:
                stream = await opener.open_stream(origin)
                streams.append(stream)
                await _read_hello(stream)

            async with trio.open_nursery() as nursery:
                for _ in range(20):
                    nursery.start_soon(open_and_read)
            assert sorted(_resumed(s) for s in streams) == [False] + [True] * 19
            for stream in streams:
                await stream.aclose()


async def test_the_first_connection_lets_the_burst_go_when_it_closes_without_a_ticket(
    tmp_path: Path,
) -> None:
    """Closed before reading, the first has no session: the next opening goes first itself."""
    server_tls, client_tls = self_signed(tmp_path)
    sessions = TLSSessions(client_tls)
    with trio.fail_after(10):
        async with ticket_room(server_tls) as room:
            room_sessions = sessions.room("127.0.0.1", room.port)
            raw = await trio.open_tcp_stream("127.0.0.1", room.port)
            first = await open_tls(raw, client_tls, "127.0.0.1", sessions=room_sessions)
            await first.aclose()
            session, goes_first = await room_sessions.offer()
            assert session is None
            assert goes_first is not None


async def test_the_first_connection_lets_the_burst_go_when_its_handshake_fails(
    tmp_path: Path,
) -> None:
    """A room the client does not trust: refused, nothing kept, the next opening goes first."""
    server_tls, _ = self_signed(tmp_path)
    (tmp_path / "other").mkdir()
    _, other_client_tls = self_signed(tmp_path / "other")
    sessions = TLSSessions(other_client_tls)
    with trio.fail_after(10):
        async with ticket_room(server_tls) as room:
            room_sessions = sessions.room("127.0.0.1", room.port)
            raw = await trio.open_tcp_stream("127.0.0.1", room.port)
            with pytest.raises(trio.BrokenResourceError) as info:
                await open_tls(raw, other_client_tls, "127.0.0.1", sessions=room_sessions)
            await raw.aclose()
            assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
            session, goes_first = await room_sessions.offer()
            assert session is None
            assert goes_first is not None


async def test_at_most_max_handshakes_are_under_way_and_the_others_wait_their_turn_connected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room holds each ClientHello it gets until told: two reach it, three wait, connected."""
    monkeypatch.setattr(_resume, "SESSION_WAIT", 0.0)  # no session to wait for: the cap alone
    server_tls, client_tls = self_signed(tmp_path)
    opener = NetworkOpener(ssl_context=client_tls, max_handshakes=2)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    [listener] = listeners
    origin = Origin("https", "127.0.0.1", listener.socket.getsockname()[1])
    accepted: list[trio.SocketStream] = []
    hellos: list[trio.SocketStream] = []
    two_hellos, answer = trio.Event(), trio.Event()
    opened: list[trio.abc.Stream] = []

    async def serve(stream: trio.SocketStream) -> None:
        theirs = trio.SSLStream(stream, server_tls, server_side=True)
        try:
            await stream.socket.recv(1, socket.MSG_PEEK)  # the ClientHello is here, left unread
            hellos.append(stream)
            if len(hellos) == 2:
                two_hellos.set()
            await answer.wait()
            await theirs.do_handshake()
            await theirs.send_all(b"hello")
            await trio.sleep_forever()
        finally:
            await trio.aclose_forcefully(theirs)

    async def accept_all(room: trio.Nursery) -> None:
        while True:
            stream = await listener.accept()
            accepted.append(stream)
            room.start_soon(serve, stream)

    async def open_one() -> None:
        stream = await opener.open_stream(origin)
        await _read_hello(stream)
        opened.append(stream)

    with trio.fail_after(10):
        async with listener, trio.open_nursery() as room:
            room.start_soon(accept_all, room)
            async with trio.open_nursery() as clients:
                for _ in range(5):
                    clients.start_soon(open_one)
                await two_hellos.wait()
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert (len(accepted), len(hellos)) == (5, 2)
                statistics = opener._handshakes.statistics()
                assert (statistics.borrowed_tokens, statistics.tasks_waiting) == (2, 3)
                answer.set()
            assert len(opened) == 5
            for stream in opened:
                await stream.aclose()
            room.cancel_scope.cancel(reason="the test is done")
