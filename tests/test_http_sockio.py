"""The lean path's socket helpers (``letagents_trio._http._sockio``): reads, writes, closes.

Over socketpairs and loopback TCP (where it matters how a close looks to the
peer), bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import struct
import sys

import pytest
import trio
import trio.testing

from letagents_trio._http import _sockio, _socknow
from letagents_trio._http._sockio import (
    READ_SIZE,
    Prefixed,
    QuietReads,
    can_send_now,
    close_now,
    discard_unread,
    read_some,
    send_now,
    unsent_size,
)
from letagents_trio._http._socknow import socket_now

from .sockets import OnlyAsyncClose, tcp_pair

# --- close_now --------------------------------------------------------------------------


async def test_close_now_closes_sockets_and_memory_streams_without_a_checkpoint() -> None:
    a, b = trio.socket.socketpair()
    stream = trio.SocketStream(a)
    assert close_now(Prefixed(stream, b"ahead"))
    assert stream.socket.fileno() == -1
    b.close()
    left, right = trio.testing.memory_stream_pair()
    assert close_now(left)
    assert await right.receive_some() == b""
    assert not close_now(trio.testing.MemorySendStream())  # type: ignore[arg-type]
    await trio.lowlevel.checkpoint()


async def test_close_now_leaves_a_stapled_stream_whose_parts_close_only_asynchronously() -> None:
    """Neither part closed: the caller closes the whole with ``aclose``."""
    parts = (OnlyAsyncClose(), OnlyAsyncClose())
    stapled = trio.StapledStream(*parts)
    assert not close_now(stapled)
    assert not any(part.closed for part in parts)
    await stapled.aclose()
    assert all(part.closed for part in parts)


# --- Prefixed ------------------------------------------------------------------------------


async def test_prefixed_gives_the_bytes_read_ahead_first_in_pieces_then_the_stream() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    stream = Prefixed(client_end, b"ahead")
    with trio.fail_after(5):
        with trio.testing.assert_checkpoints():
            assert await stream.receive_some(3) == b"ahe"
        assert await stream.receive_some() == b"ad"
        await server_end.send_all(b"after")
        assert await stream.receive_some() == b"after"
        await stream.send_all(b"out")
        await stream.wait_send_all_might_not_block()
        assert await server_end.receive_some() == b"out"
        await stream.send_eof()
        assert await server_end.receive_some() == b""
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some()


async def test_prefixed_reads_the_stream_at_most_as_asked_once_its_bytes_are_given() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    stream = Prefixed(client_end, b"")
    with trio.fail_after(5):
        await server_end.send_all(b"0123456789")
        assert await stream.receive_some(4) == b"0123"
        assert await stream.receive_some() == b"456789"


async def test_prefixed_cannot_half_close_a_stream_that_cannot() -> None:
    """Broken, as trio says of a stream it cannot use: never an AttributeError."""
    with pytest.raises(trio.BrokenResourceError):
        await Prefixed(OnlyAsyncClose(), b"ahead").send_eof()


# --- send_now -----------------------------------------------------------------------------


async def test_send_now_writes_a_plain_socket_at_once_and_says_how_much() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with left, right:
        assert can_send_now(stream)
        assert send_now(stream, b"exit frame") == 10
        assert send_now(Prefixed(stream, b"read ahead"), b"!") == 1
        assert await right.recv(100) == b"exit frame!"


async def test_send_now_says_0_when_the_buffer_is_full_and_raises_when_broken() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with left:
        with right:
            while send_now(stream, b"x" * 65536):
                pass
            assert send_now(stream, b"x") == 0
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            send_now(stream, b"x")
    await trio.lowlevel.checkpoint()


def test_send_now_declines_streams_it_cannot_write_synchronously() -> None:
    client_end, _server_end = trio.testing.memory_stream_pair()
    assert not can_send_now(client_end)
    assert send_now(client_end, b"x") is None
    assert unsent_size(client_end) is None
    assert unsent_size(Prefixed(client_end, b"")) is None


def test_a_plain_socket_keeps_nothing_back() -> None:
    """What a plain socket took is in the kernel: a close drops none of it."""
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with left, right:
        while send_now(stream, b"x" * 65536):
            pass
        assert unsent_size(stream) == 0
        assert unsent_size(Prefixed(stream, b"ahead")) == 0


# --- SocketNow: the same steps, the socket found once -------------------------------------------


async def test_socket_now_writes_drains_and_closes_a_plain_socket_as_the_functions_do() -> None:
    """Found through bytes read ahead; an orderly end after the drain, and the reader woken."""
    async with tcp_pair() as (stream, peer):
        with trio.fail_after(5):
            now = socket_now(Prefixed(stream, b"read ahead"))
            assert now is not None
            assert now.send(b"exit") == 4
            assert now.unsent_size() == 0
            await peer.send(b"heartbeat")
            await trio.lowlevel.wait_readable(stream.socket)
            woken: list[BaseException] = []

            async def reader() -> None:
                try:
                    await read_some(stream, 100)
                except trio.ClosedResourceError as exc:
                    woken.append(exc)

            async with trio.open_nursery() as nursery:
                now.discard_unread()
                nursery.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked()
                now.close()
            assert len(woken) == 1
            assert stream.socket.fileno() == -1
            assert await peer.recv(100) == b"exit"
            assert await peer.recv(100) == b""  # drained first: an end, not a reset


async def test_socket_now_drains_at_most_what_discard_unread_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One limit for both: a megabyte of what the peer sent before the close, no more."""
    limits: list[int] = []
    monkeypatch.setattr(_sockio, "drain_fd", lambda fd, limit: limits.append(limit))
    monkeypatch.setattr(_socknow, "drain_fd", lambda fd, limit: limits.append(limit))
    async with tcp_pair() as (stream, _peer):
        now = socket_now(stream)
        assert now is not None
        now.discard_unread()
        discard_unread(stream)
    assert limits == [1 << 20, 1 << 20]


def test_socket_now_is_none_where_send_now_cannot_write() -> None:
    client_end, _server_end = trio.testing.memory_stream_pair()
    assert socket_now(client_end) is None
    assert socket_now(Prefixed(client_end, b"ahead")) is None


async def test_socket_now_says_0_when_the_buffer_is_full() -> None:
    left, right = trio.socket.socketpair()
    with left, right:
        now = socket_now(trio.SocketStream(left))
        assert now is not None
        while now.send(b"x" * 65536):
            pass
        assert now.send(b"x") == 0
        assert now.unsent_size() == 0
    await trio.lowlevel.checkpoint()


# --- read_some: the lean read of a plain socket ------------------------------------------------


async def test_read_some_reads_a_plain_socket_and_says_when_it_ends() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with left, right, trio.fail_after(5):
        await right.send(b"news")
        with trio.testing.assert_checkpoints():  # even with bytes waiting
            assert await read_some(stream, 100) == b"news"
        await right.send(b"0123456789")
        assert await read_some(stream, 4) == b"0123"
        assert await read_some(stream, 100) == b"456789"
        right.shutdown(trio.socket.SHUT_WR)
        assert await read_some(stream, 100) == b""


async def test_read_some_gives_the_bytes_read_ahead_first() -> None:
    left, right = trio.socket.socketpair()
    with left, right, trio.fail_after(5):
        stream = Prefixed(trio.SocketStream(left), b"ahead")
        await right.send(b"after")
        assert await read_some(stream, 100) == b"ahead"
        assert await read_some(stream, 100) == b"after"


async def test_read_some_of_a_closed_socket_is_closed_resource_error() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with right, trio.fail_after(5):
        assert close_now(stream)
        with pytest.raises(trio.ClosedResourceError):
            await read_some(stream, 100)


async def test_a_socket_closed_while_read_some_waits_wakes_it() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with right, trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def close_once_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                assert close_now(stream)

            nursery.start_soon(close_once_waiting)
            with pytest.raises(trio.ClosedResourceError):
                await read_some(stream, 100)


async def test_read_some_of_a_reset_connection_is_broken_naming_the_reset() -> None:
    listener = trio.socket.socket()
    with listener, trio.fail_after(5):
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = trio.socket.socket()
        await client.connect(listener.getsockname())
        accepted, _ = await listener.accept()
        stream = trio.SocketStream(client)
        with client:
            # A close with a zero linger sends a reset instead of an end.
            accepted.setsockopt(
                trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            accepted.close()
            with pytest.raises(trio.BrokenResourceError) as broken:
                await read_some(stream, 100)
    assert isinstance(broken.value.__cause__, ConnectionResetError)


async def test_read_some_reads_other_streams_with_their_own_receive_some() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    with trio.fail_after(5):
        await server_end.send_all(b"in memory")
        assert await read_some(client_end, 100) == b"in memory"
        await server_end.send_all(b"0123456789")
        assert await read_some(client_end, 4) == b"0123"
        assert await read_some(Prefixed(client_end, b"ahead"), 2) == b"ah"


async def test_a_wake_up_that_finds_nothing_to_read_waits_for_the_next_bytes() -> None:
    """Two readers of one socket wake for the same bytes: the one that finds none waits on."""
    left, right = trio.socket.socketpair()
    twin = trio.socket.fromfd(left.fileno(), left.family, left.type)
    got: list[bytes] = []
    with left, right, twin, trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def reader(socket: trio.socket.SocketType) -> None:
                got.append(await read_some(trio.SocketStream(socket), 100))

            nursery.start_soon(reader, left)
            nursery.start_soon(reader, twin)
            await trio.testing.wait_all_tasks_blocked()
            await right.send(b"first")
            await trio.testing.wait_all_tasks_blocked()
            assert got == [b"first"]
            await right.send(b"second")
    assert got == [b"first", b"second"]


async def test_read_some_reads_a_plain_socket_without_socketstreams_machinery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One wait and one read: not SocketStream.receive_some, whose per-read cost is the point."""

    async def not_this_way(  # noqa: ASYNC124 (replaces an async method)
        self: trio.SocketStream, max_bytes: int | None = None
    ) -> bytes:
        raise AssertionError("read through SocketStream.receive_some")

    monkeypatch.setattr(trio.SocketStream, "receive_some", not_this_way)
    left, right = trio.socket.socketpair()
    with left, right, trio.fail_after(5):
        await right.send(b"lean")
        assert await read_some(trio.SocketStream(left), 100) == b"lean"


# --- discard_unread: an orderly end, not a reset ----------------------------------------------


@pytest.mark.parametrize("drained", [True, False])
async def test_a_close_after_discard_unread_is_an_orderly_end(drained: bool) -> None:
    """Bytes left unread turn a close into a reset; drained, the peer reads an end."""
    async with tcp_pair() as (stream, peer):
        with trio.fail_after(5):
            await peer.send(b"heartbeat")
            await stream.send_all(b"exit")
            await trio.lowlevel.wait_readable(stream.socket)
            if drained:
                discard_unread(stream)
            assert close_now(stream)
            assert await peer.recv(100) == b"exit"  # what came first is read either way
            if drained:
                assert await peer.recv(100) == b""
            else:
                with pytest.raises(ConnectionResetError):
                    await peer.recv(100)


async def test_discard_unread_drains_the_socket_under_a_tls_stream() -> None:
    """A TLS stream about to close: its socket's unread records are dropped (an orderly end)."""

    class OverTLS(trio.abc.Stream):
        """A stand-in for a TLS layer: all :func:`discard_unread` looks at is its transport."""

        def __init__(self, transport_stream: trio.SocketStream) -> None:
            self.transport_stream = transport_stream

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            raise NotImplementedError

        async def wait_send_all_might_not_block(self) -> None:
            raise NotImplementedError

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            raise NotImplementedError

        async def aclose(self) -> None:
            raise NotImplementedError

    async with tcp_pair() as (stream, peer):
        with trio.fail_after(5):
            await peer.send(b"a record")
            await trio.lowlevel.wait_readable(stream.socket)
            discard_unread(Prefixed(OverTLS(stream), b"read ahead"))
            await peer.send(b"!")
            assert await read_some(stream, 100) == b"!"


async def test_discard_unread_reads_at_most_its_limit_and_leaves_other_streams() -> None:
    async with tcp_pair() as (stream, peer):
        with trio.fail_after(5):
            await peer.send(b"x" * 100)
            await trio.lowlevel.wait_readable(stream.socket)
            discard_unread(stream, limit=60)
            assert await read_some(stream, 1000) == b"x" * 40
    client_end, server_end = trio.testing.memory_stream_pair()
    await server_end.send_all(b"in memory")
    discard_unread(client_end)  # not a socket: left alone
    assert await read_some(client_end, 100) == b"in memory"


async def test_discard_unread_reads_on_past_one_read_up_to_its_limit_and_stops_at_the_end() -> None:
    """More than one read's worth: the limit is counted across reads, to the byte."""
    size = READ_SIZE + 1000
    async with tcp_pair() as (stream, peer):
        with trio.fail_after(5):
            sent = 0
            while sent < size:
                sent += await peer.send(b"x" * (size - sent))
            await trio.lowlevel.wait_readable(stream.socket)
            discard_unread(stream, limit=READ_SIZE + 1)
            rest = b""
            while len(rest) < size - READ_SIZE - 1:
                rest += await read_some(stream, size)
            assert len(rest) == size - READ_SIZE - 1
            await peer.send(b"y" * size)
            peer.shutdown(trio.socket.SHUT_WR)
            await trio.lowlevel.wait_readable(stream.socket)
            discard_unread(stream)  # everything, then the end: it returns
            assert await read_some(stream, 100) == b""


# --- QuietReads: bytes the kernel keeps until the deadline draws near ----------------------

# Linux only: elsewhere a quiet read is a plain one (the last test here).
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RCVLOWAT polling")


@linux_only
async def test_a_quiet_read_leaves_what_it_may_keep_until_its_deadline_draws_near() -> None:
    """The heartbeat stays with the kernel; the read takes it at the check, saying when it came."""
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream, margin=0.5)
        sent_at = trio.current_time()
        await theirs.send(b": heartbeat\n\n")
        with trio.fail_after(5), trio.move_on_after(1.0):
            assert await reads.read(100, keep=50) == b": heartbeat\n\n"
            read_at = trio.current_time()
        assert read_at - sent_at >= 0.5  # not woken by the heartbeat: at the check
        assert reads.heard_at is not None
        assert sent_at - 0.05 <= reads.heard_at <= sent_at + 0.1


@linux_only
async def test_a_quiet_read_wakes_at_once_for_more_than_it_keeps_and_for_the_end() -> None:
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream)
        with trio.fail_after(5), trio.move_on_after(60):
            start = trio.current_time()
            await theirs.send(b"\x89\x00")  # a lone ping: kept
            await theirs.send(b"\x88\x02\x03\xe8")  # then a close frame: wakes the read
            assert await reads.read(100, keep=2) == b"\x89\x00\x88\x02\x03\xe8"
            assert reads.heard_at is None  # read as they came
            theirs.shutdown(trio.socket.SHUT_WR)
            assert await reads.read(100, keep=2) == b""
            assert trio.current_time() - start < 5


@linux_only
async def test_a_quiet_read_that_finds_nothing_kept_waits_as_a_plain_read() -> None:
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream, margin=0.5)
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def after_the_check() -> None:
                    await trio.sleep(0.7)
                    await theirs.send(b"x")

                nursery.start_soon(after_the_check)
                with trio.move_on_after(30) as scope:
                    start = trio.current_time()
                    # The check comes 0.5 s before the deadline: nothing kept. From
                    # then on one byte wakes the read, long before the deadline.
                    scope.deadline = start + 1.0
                    assert await reads.read(100, keep=50) == b"x"
                    assert reads.heard_at is None
                assert not scope.cancelled_caught


def read_quietly(nursery: trio.Nursery, reads: QuietReads, got: list[bytes]) -> None:
    """Start one read that may keep 50 bytes (for at most 60 s); what it reads goes to ``got``."""

    async def reader() -> None:
        with trio.move_on_after(60):
            got.append(await reads.read(100, keep=50))

    nursery.start_soon(reader)


@linux_only
async def test_loud_after_the_room_reset_the_connection_hands_over_nothing() -> None:
    """The break is the next read's to report; loud itself neither raises nor invents bytes."""
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream)
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                read_quietly(nursery, reads, [])
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel(reason="the mark is up, nothing came")
            # A close with a zero linger sends a reset instead of an end.
            linger = struct.pack("ii", 1, 0)
            theirs.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, linger)
            theirs.close()
            await trio.lowlevel.wait_readable(stream.socket)
            assert reads.loud() == b""


@linux_only
@pytest.mark.parametrize("kept", [b"kept", b""], ids=["kept", "nothing-kept"])
async def test_loud_hands_over_what_was_kept_and_lets_every_byte_wake(kept: bytes) -> None:
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream)
        got: list[bytes] = []
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                read_quietly(nursery, reads, got)
                await trio.testing.wait_all_tasks_blocked()
                if kept:
                    await theirs.send(kept)
                    await trio.testing.wait_all_tasks_blocked()
                    assert got == []
                assert reads.loud() == kept
                assert reads.loud() == b""  # loud already: nothing more to hand over
                await theirs.send(b"!")
        assert got == [b"!"]


async def test_a_quiet_read_where_nothing_can_be_kept_waits_its_whole_deadline() -> None:
    """A socketpair keeps nothing: no check before the deadline, no error at it."""
    left, right = trio.socket.socketpair()
    with left, right, trio.fail_after(5):
        reads = QuietReads(trio.SocketStream(left), margin=0.05)
        assert reads.wire_size(13) == 0
        with trio.move_on_after(0.2) as scope:
            await reads.read(100, keep=50)
        assert scope.cancelled_caught
        await right.send(b"after")
        assert await reads.read(100, keep=50) == b"after"


async def test_a_quiet_read_of_anything_but_linux_tcp_is_a_plain_read() -> None:
    """A socketpair, an in-memory stream, TLS: read as the bytes come."""
    left, right = trio.socket.socketpair()
    client_end, server_end = trio.testing.memory_stream_pair()
    with left, right, trio.fail_after(5):
        pairs = ((trio.SocketStream(left), right.send), (client_end, server_end.send_all))
        for ours, send in pairs:
            reads = QuietReads(ours)
            await send(b"hb")
            assert await reads.read(100, keep=50) == b"hb"
            assert reads.heard_at is None
            assert reads.loud() == b""


# --- QuietReads.read_by: the read and its deadline in one ------------------------------------


async def test_read_by_gives_what_comes_before_its_deadline_and_none_after() -> None:
    """A socketpair and an in-memory stream: nothing kept, the deadline is the read's own."""
    left, right = trio.socket.socketpair()
    client_end, server_end = trio.testing.memory_stream_pair()
    with left, right, trio.fail_after(5):
        pairs = ((trio.SocketStream(left), right.send), (client_end, server_end.send_all))
        for ours, send in pairs:
            reads = QuietReads(ours, margin=0.05)
            start = trio.current_time()
            assert await reads.read_by(100, start + 0.2, keep=50) is None
            assert trio.current_time() - start >= 0.2
            await send(b"hb")
            assert await reads.read_by(100, trio.current_time() + 60, keep=50) == b"hb"
            assert reads.heard_at is None


@linux_only
@pytest.mark.parametrize("first", ["its own", "the caller's"])
async def test_read_by_takes_what_was_kept_just_before_the_first_deadline(first: str) -> None:
    """The check comes a margin before whichever deadline is first: the read's or the caller's."""
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream, margin=0.5)
        start = trio.current_time()
        soon, late = start + 1.0, start + 30
        own, callers = (soon, late) if first == "its own" else (late, soon)
        await theirs.send(b"\x89\x00")
        with trio.fail_after(5), trio.move_on_at(callers):
            assert await reads.read_by(100, own, keep=2) == b"\x89\x00"
            read_at = trio.current_time()
        assert 0.5 <= read_at - start < 1.0  # at the check, before either deadline
        assert reads.heard_at is not None
        assert start - 0.05 <= reads.heard_at <= start + 0.1


@linux_only
async def test_read_by_after_a_check_that_found_nothing_waits_until_its_deadline() -> None:
    """Nothing kept: any byte wakes the read from the check on, and none by the deadline is None."""
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream, margin=0.5)
        with trio.fail_after(5):
            start = trio.current_time()
            assert await reads.read_by(100, start + 1.0, keep=50) is None
            assert trio.current_time() - start >= 1.0
            async with trio.open_nursery() as nursery:

                async def after_the_check() -> None:
                    await trio.sleep(0.7)
                    await theirs.send(b"x")

                nursery.start_soon(after_the_check)
                start = trio.current_time()
                assert await reads.read_by(100, start + 1.0, keep=50) == b"x"
                assert trio.current_time() - start < 1.0
                assert reads.heard_at is None


async def test_quiet_reads_give_the_bytes_read_ahead_then_read_the_stream_straight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once a Prefixed stream has given its bytes back, reads no longer go through it."""
    client_end, server_end = trio.testing.memory_stream_pair()
    reads = QuietReads(Prefixed(client_end, b"ahead"))
    with trio.fail_after(5):
        assert await reads.read(3) == b"ahe"
        assert await reads.read_by(100, trio.current_time() + 60, keep=0) == b"ad"
        through: list[int | None] = []
        monkeypatch.setattr(Prefixed, "receive_some", lambda _, size: through.append(size))
        await server_end.send_all(b"after")
        assert await reads.read(100) == b"after"
        assert through == []


@linux_only
async def test_a_read_that_keeps_nothing_wakes_for_a_single_byte() -> None:
    """Without ``keep`` nothing waits in the kernel, even with no deadline to check before."""
    async with tcp_pair() as (stream, theirs):
        reads = QuietReads(stream)
        with trio.fail_after(5):
            await theirs.send(b"x")
            assert await reads.read(100) == b"x"
        # The mark the read left: every byte wakes the next one.
        assert stream.socket.getsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVLOWAT) == 1
