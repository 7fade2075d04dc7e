"""The lean path's TLS stream (``letagents_trio._http._tls``) against trio's, over loopback.

The server side is ``trio.SSLStream`` with a certificate made for the test
(:func:`.tiny_room.self_signed`); the client is :func:`open_tls`. The real
clock, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import fcntl
import ssl
import struct
import sys
import termios
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio._http._sockio import (
    Prefixed,
    QuietReads,
    close_now,
    send_now,
    unsent_size,
)
from letagents_trio._http._tls import TLSStream, open_tls

from .tiny_room import self_signed

if TYPE_CHECKING:
    from pathlib import Path


@asynccontextmanager
async def tls_pair(
    tmp_path: Path,
    *,
    hostname: str = "127.0.0.1",
    configure: Callable[[ssl.SSLContext], None] | None = None,
) -> AsyncIterator[tuple[TLSStream, trio.SSLStream[trio.SocketStream]]]:
    """Ours (the client, handshake done) and trio's server side of one TLS connection.

    ``configure`` is applied to both contexts (a protocol version, a cipher).
    """
    server_tls, client_tls = self_signed(tmp_path)
    if configure is not None:
        configure(server_tls)
        configure(client_tls)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    [listener] = listeners
    port = listener.socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        accepted: list[trio.SSLStream[trio.SocketStream]] = []

        async def accept() -> None:
            server = trio.SSLStream(await listener.accept(), server_tls, server_side=True)
            await server.do_handshake()
            accepted.append(server)

        nursery.start_soon(accept)
        raw = await trio.open_tcp_stream("127.0.0.1", port)
        ours = await open_tls(raw, client_tls, hostname)
    [theirs] = accepted
    try:
        yield ours, theirs
    finally:
        await ours.aclose()
        await trio.aclose_forcefully(theirs)
        await listener.aclose()


async def test_a_read_hands_over_every_record_already_received(tmp_path: Path) -> None:
    """Three records, one read (trio's stream gives one record a read)."""
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            assert ours.version() == "TLSv1.3"
            assert ours.cipher() is not None
            for part in (b"one ", b"two ", b"three"):
                await theirs.send_all(part)
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert await ours.receive_some() == b"one two three"
            await theirs.send_all(b"0123456789")
            assert await ours.receive_some(4) == b"0123"
            with trio.testing.assert_checkpoints():
                assert await ours.receive_some() == b"456789"  # buffered: still a checkpoint
            await ours.send_all(b"hello")
            assert await theirs.receive_some() == b"hello"


async def test_the_end_with_or_without_close_notify_reads_as_the_end(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.send_all(b"last")
            await theirs.aclose()  # close_notify
            assert await ours.receive_some() == b"last"
            assert await ours.receive_some() == b""
            assert await ours.receive_some() == b""
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.send_all(b"last")
            await theirs.transport_stream.aclose()  # no close_notify
            assert await ours.receive_some() == b"last"
            assert await ours.receive_some() == b""


async def test_garbage_from_the_peer_breaks_the_stream_naming_the_tls_error(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.transport_stream.send_all(b"\x17\x03\x03\x00\x05hello")
            with pytest.raises(trio.BrokenResourceError) as info:
                await ours.receive_some()
            assert isinstance(info.value.__cause__, ssl.SSLError)


async def test_closed_at_once_without_close_notify(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            assert close_now(ours)
            with pytest.raises(trio.ClosedResourceError):
                await ours.receive_some()
            # The peer sees the connection end, with no close_notify.
            with pytest.raises(trio.BrokenResourceError):
                await theirs.receive_some()


@pytest.mark.parametrize(
    ("server", "hostname", "cause"),
    [
        ("hangs up", "127.0.0.1", None),
        ("is someone else", "elsewhere.example", ssl.SSLCertVerificationError),
    ],
)
async def test_a_failed_handshake_breaks_the_stream(
    tmp_path: Path, server: str, hostname: str, cause: type[Exception] | None
) -> None:
    """A peer that hangs up, or a certificate for another host: refused, naming the TLS error."""
    server_tls, client_tls = self_signed(tmp_path)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    [listener] = listeners
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def serve() -> None:
                accepted = await listener.accept()
                if server == "hangs up":
                    await accepted.aclose()
                    return
                theirs = trio.SSLStream(accepted, server_tls, server_side=True)
                with pytest.raises(trio.BrokenResourceError):
                    await theirs.do_handshake()
                await trio.aclose_forcefully(theirs)

            nursery.start_soon(serve)
            raw = await trio.open_tcp_stream("127.0.0.1", listener.socket.getsockname()[1])
            with pytest.raises(trio.BrokenResourceError) as info:
                await open_tls(raw, client_tls, hostname)
            await raw.aclose()
    await listener.aclose()
    if cause is not None:
        assert isinstance(info.value.__cause__, cause)


async def test_send_now_writes_a_record_at_once_and_what_the_kernel_left_goes_first(
    tmp_path: Path,
) -> None:
    """A pong goes in one write; a record cut short by a full buffer goes on before the next."""
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            with trio.testing.assert_no_checkpoints():
                assert send_now(ours, b"pong") == 4
                assert send_now(Prefixed(ours, b""), b"!") == 1
            assert await theirs.receive_some() == b"pong"  # trio's: a record a read
            assert await theirs.receive_some() == b"!"
            # Fill the socket's buffer: the peer does not read.
            sent: list[bytes] = []
            while True:
                assert unsent_size(ours) == len(ours._unsent)
                chunk = bytes([len(sent) % 251]) * 60_000
                sent.append(chunk)
                if ours._unsent:
                    break
                assert send_now(ours, chunk) == len(chunk)
            assert unsent_size(Prefixed(ours, b"ahead")) == len(ours._unsent) > 0
            assert send_now(ours, b"more") == 0  # the rest of a record waits first
            sent.pop()  # never sent
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ours.send_all, b"last")
                got = b""
                while not got.endswith(b"last"):
                    got += await theirs.receive_some()
            assert got == b"".join(sent) + b"last"
            await ours.send_all(b"after")
            assert await theirs.receive_some() == b"after"


def _tls12(cipher: str) -> Callable[[ssl.SSLContext], None]:
    def configure(context: ssl.SSLContext) -> None:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(f"{cipher}:@SECLEVEL=0")

    return configure


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="quiet reads: Linux only")
@pytest.mark.parametrize(
    ("configure", "overhead"),
    [
        (None, 5 + 1 + 16),  # TLS 1.3, AES-GCM: header, content type, tag
        (_tls12("ECDHE-ECDSA-AES128-GCM-SHA256"), 5 + 8 + 16),  # header, nonce, tag
        (_tls12("ECDHE-ECDSA-AES128-CCM"), 5 + 8 + 16),
        (_tls12("ECDHE-ECDSA-AES128-CCM8"), 5 + 8 + 8),  # the short tag
        (_tls12("ECDHE-ECDSA-CHACHA20-POLY1305"), 5 + 16),  # no explicit nonce
        (_tls12("ECDHE-ECDSA-AES128-SHA256"), None),  # CBC: padded, it varies
    ],
    ids=["tls1.3", "gcm", "ccm", "ccm8", "chacha20", "cbc"],
)
async def test_a_quiet_read_weighs_a_heartbeat_as_its_tls_record_on_the_wire(
    tmp_path: Path, configure: Callable[[ssl.SSLContext], None] | None, overhead: int | None
) -> None:
    """What the kernel may keep is one heartbeat's record exactly: a byte more could keep an event.

    Behind bytes read ahead too (a WebSocket's first frame read with its
    upgrade). A cipher whose records vary in size keeps nothing.
    """
    heartbeat = b": heartbeat\n\n"
    with trio.fail_after(10):
        async with tls_pair(tmp_path, configure=configure) as (ours, theirs):
            # A first exchange, so that what the handshake left (TLS 1.3's
            # tickets) is read before a record is weighed.
            await theirs.send_all(b"hello")
            assert await ours.receive_some() == b"hello"
            await theirs.send_all(heartbeat)
            socket = ours.transport_stream.socket  # type: ignore[attr-defined]
            await trio.lowlevel.wait_readable(socket)
            queued = struct.unpack("i", fcntl.ioctl(socket.fileno(), termios.FIONREAD, b"\0" * 4))
            for stream in (ours, Prefixed(ours, b"")):
                weighs = QuietReads(stream).wire_size(len(heartbeat))
                if overhead is None:
                    assert weighs == 0
                else:
                    assert weighs == queued[0] == len(heartbeat) + overhead
            assert await ours.receive_some() == heartbeat


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="quiet reads: Linux only")
async def test_loud_under_tls_hands_over_nothing_and_the_kept_record_wakes_the_read(
    tmp_path: Path,
) -> None:
    """What the kernel kept under TLS cannot be read without a checkpoint: the reader gets it."""
    heartbeat = b": heartbeat\n\n"
    got: list[bytes] = []
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.send_all(b"hello")
            assert await ours.receive_some() == b"hello"
            reads = QuietReads(ours)
            keep = reads.wire_size(len(heartbeat))
            async with trio.open_nursery() as nursery:

                async def reader() -> None:
                    with trio.move_on_after(60):
                        got.append(await reads.read(100, keep=keep))

                nursery.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked(0.05)
                await theirs.send_all(heartbeat)
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert got == []  # kept
                assert reads.loud() == b""
    assert got == [heartbeat]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="quiet reads: Linux only")
async def test_a_quiet_read_under_tls_takes_at_its_check_no_more_than_it_asks(
    tmp_path: Path,
) -> None:
    heartbeat = b": heartbeat\n\n"
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.send_all(b"hello")
            assert await ours.receive_some() == b"hello"
            # The check comes a second before the deadline: a loaded host's
            # scheduling cannot make the deadline cut the read before it.
            reads = QuietReads(ours, margin=1.0)
            await theirs.send_all(heartbeat)
            with trio.move_on_after(2.0):
                assert await reads.read(4, keep=reads.wire_size(len(heartbeat))) == b": he"
            assert reads.heard_at is not None  # found kept at the check
            assert await ours.receive_some() == b"artbeat\n\n"


async def test_a_read_asks_for_one_byte_or_more(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.send_all(b"ab")
            assert await ours.receive_some(1) == b"a"
            assert await ours.receive_some(1) == b"b"
            with pytest.raises(ValueError, match=r"^max_bytes must be at least 1$"):
                await ours.receive_some(0)


async def test_a_writer_the_peer_does_not_read_holds_back_neither_reads_nor_leaves_pongs(
    tmp_path: Path,
) -> None:
    """A write stuck on a full socket: records already received are read at once, and
    ``send_now`` does nothing (0) rather than cut in between that writer's records."""
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.send_all(b"0123456789")
            assert await ours.receive_some(4) == b"0123"  # the rest waits, decrypted
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ours.send_all, b"x" * (32 << 20))  # more than the kernel takes
                await trio.testing.wait_all_tasks_blocked(0.05)
                with trio.fail_after(1):
                    assert await ours.receive_some() == b"456789"
                with trio.testing.assert_no_checkpoints():
                    assert send_now(ours, b"pong") == 0
                nursery.cancel_scope.cancel()


def _fill_until_a_record_is_cut(ours: TLSStream) -> bytes:
    """Write at once until the kernel takes only part of a record (the peer does not read)."""
    sent = b""
    while not unsent_size(ours):
        chunk = bytes([len(sent) % 251]) * 60_000
        assert send_now(ours, chunk) == len(chunk)
        sent += chunk
    return sent


async def _read_into(stream: trio.abc.Stream, size: int, got: bytearray) -> None:
    """Read ``stream`` into ``got`` until it holds ``size`` bytes."""
    while len(got) < size:
        got += await stream.receive_some()


async def test_send_all_of_nothing_sends_the_rest_of_a_record_cut_short(tmp_path: Path) -> None:
    """What a caller about to close does when the kernel took only part of its record."""
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            sent = _fill_until_a_record_is_cut(ours)
            got = bytearray()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_into, theirs, len(sent), got)
                await ours.send_all(b"")
                assert unsent_size(ours) == 0
            assert got == sent


async def test_a_stream_send_now_cannot_write_has_no_unsent_size(tmp_path: Path) -> None:
    """Over a stream that is not a plain socket, ``send_now`` declines and nothing waits."""
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, _theirs):
            over_memory = TLSStream(
                trio.testing.memory_stream_pair()[0], ours._ssl, ours._incoming, ours._outgoing
            )
            assert over_memory.send_now(b"x") is None
            assert unsent_size(over_memory) is None


async def test_the_rest_of_a_record_cut_short_goes_once_before_the_next(tmp_path: Path) -> None:
    """Once the kernel takes more, ``send_now`` finishes the cut record, then writes its own."""
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            sent = _fill_until_a_record_is_cut(ours)
            got = bytearray()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_into, theirs, len(sent) + 4, got)
                # The peer reads: as the kernel takes more, the rest of the cut
                # record goes, then the next one.
                while send_now(ours, b"next") == 0:
                    await ours.wait_send_all_might_not_block()
            assert got == sent + b"next"


async def test_close_notify_reads_as_the_end_at_once_while_the_socket_stays_open(
    tmp_path: Path,
) -> None:
    """The peer ends TLS but keeps its socket (it waits for our close_notify): the end is now."""
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(theirs.unwrap)  # close_notify, then waits for ours
                with trio.fail_after(1):
                    assert await ours.receive_some() == b""
                    assert await ours.receive_some() == b""
                nursery.cancel_scope.cancel()


async def test_the_last_bytes_read_with_close_notify_come_before_the_end(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with tls_pair(tmp_path) as (ours, theirs):
            await theirs.send_all(b"last")
            await theirs.aclose()  # close_notify
            await trio.testing.wait_all_tasks_blocked(0.05)  # both records arrive
            assert await ours.receive_some() == b"last"
            assert await ours.receive_some() == b""


async def test_over_a_stream_not_a_socket_a_read_gives_whole_records_and_keeps_a_cut_one(
    tmp_path: Path,
) -> None:
    """A transport that is not a socket is read through its own ``receive_some``; a read
    gives the records that came whole, and a record that came in part waits for its rest."""
    server_tls, client_tls = self_signed(tmp_path)
    client_end, room_side_of_client = trio.testing.memory_stream_pair()
    client_side_of_room, room_end = trio.testing.memory_stream_pair()

    async def forward(source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
        while data := await source.receive_some():
            await sink.send_all(data)

    with trio.fail_after(10):
        theirs = trio.SSLStream(room_end, server_tls, server_side=True)
        async with trio.open_nursery() as relay:
            relay.start_soon(forward, room_side_of_client, client_side_of_room)
            relay.start_soon(forward, client_side_of_room, room_side_of_client)
            relay.start_soon(theirs.do_handshake)
            ours = await open_tls(client_end, client_tls, "127.0.0.1")
            await theirs.send_all(b"warm")  # after the room's tickets
            assert await ours.receive_some() == b"warm"
            await trio.testing.wait_all_tasks_blocked()
            relay.cancel_scope.cancel()
        await theirs.send_all(b"first")
        await theirs.send_all(b"second")
        records = b""
        while len(records) < 10 or len(records) < _records_end(records, 2):
            records += await client_side_of_room.receive_some()
        first_end = _records_end(records, 1)
        await room_side_of_client.send_all(records[: first_end + 5])  # the second's head only
        assert await ours.receive_some() == b"first"
        await room_side_of_client.send_all(records[first_end + 5 :])
        assert await ours.receive_some() == b"second"


def _records_end(data: bytes, count: int) -> int:
    """Where the first ``count`` TLS records of ``data`` end (each a 5-byte head and its length)."""
    end = 0
    for _ in range(count):
        if len(data) < end + 5:
            return end + 5
        end += 5 + int.from_bytes(data[end + 3 : end + 5], "big")
    return end
