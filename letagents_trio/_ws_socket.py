"""One held process socket (PROTOCOL §3.1, our extension): frames, liveness, the exit.

:class:`ProcessSocket` is what :class:`~letagents_trio._websocket.WebSocketConnector`
hands the holder once the room has accepted the upgrade: wsproto's frame layer
over any ``trio.abc.Stream`` (a TCP or TLS stream, or an in-memory one in
tests), with no task of its own. It iterates as the holder's news:

1. **News**: every chunk read is one :class:`StreamNews` (so the holder's
   silence deadline re-arms on pings too); the ``open`` text frame names the
   connection and ``ended`` ends the session. The room's pings are answered,
   a pong being one write when the socket takes it at once.
2. **Liveness**: the read waits at most ``ping_interval`` for a byte; then the
   socket pings, and one silent ``pong_timeout`` longer is dropped
   (:class:`~letagents_trio.RoomUnreachable`). The deadline lives in the read
   itself: no timer task per socket.
3. **The exit** (:meth:`ProcessSocket.leave`): the exit frame, made when the
   room names the connection, goes out at once without a checkpoint when the
   kernel takes it, over a plain socket or the lean path's TLS over one
   (:meth:`ProcessSocket.leave_nowait`: with its normal close, the socket
   then closed at once; to a room that acknowledges exits, alone, its close
   written as the socket closes), or with its close in turn with the
   reader's pongs, the socket closed by the exit only once all of it is out.
   From then on the reader sends nothing; a close or a break ends the
   iteration (the holder, leaving, stops). A room that acknowledges exits
   has its answer read by the reader and awaited by
   :meth:`~ProcessSocket.leave` until the socket closes; an exit the socket
   cannot carry, or whose answer never came, is POSTed through the room
   client. Any other answer waits unparsed for the holder's stop or the
   socket's close, and the socket is drained before it closes, so that the
   room sees an orderly end and not a reset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, NoReturn, final

import trio
from wsproto.connection import Connection, ConnectionState
from wsproto.events import Ping

from ._errors import RoomUnreachable
from ._http import QuietReads, SocketNow, close_now, discard_unread, send_now, socket_now
from ._ws_frames import (
    NOTHING_NEW,
    FrameBounds,
    FrameEdges,
    exit_frames,
    read_exit_answer,
    read_news,
)

if TYPE_CHECKING:
    from ._connector import StreamNews

__all__ = ["ProcessSocket"]

# Bytes asked for per read: the room's frames are tens of bytes.
_RECEIVE_BYTES: Final = 4096
# What the kernel may keep unread: one ping with no payload, the room's
# heartbeat (two bytes, in one TLS record over TLS). A second ping wakes the
# read, and so does anything else the room sends (its smallest, a close frame
# with its code, is four bytes; a room of this protocol never closes without
# one), so nothing but a lone ping ever waits, and at most one of the room's
# ping intervals.
_KEPT_BYTES: Final = 2


@final
class _Liveness:
    """When the room was last heard, and how long the read waits for more.

    A ping interval after the room's latest bytes; once the socket has pinged
    (the interval passed in silence), the pong timeout after its ping.
    """

    def __init__(self, ping_interval: float, pong_timeout: float) -> None:
        self.ping_interval = ping_interval
        self.pong_timeout = pong_timeout
        self.heard_at = trio.current_time()
        self.deadline = self.heard_at + ping_interval
        self.awaiting_pong = False

    def heard(self, kept_since: float | None) -> None:
        """The room's bytes arrived: now, or when the kernel began keeping them."""
        self.heard_at = trio.current_time() if kept_since is None else kept_since
        self.deadline = self.heard_at + self.ping_interval
        self.awaiting_pong = False

    def pinged(self) -> None:
        """The socket pinged: the room has the pong timeout to answer."""
        self.awaiting_pong = True
        self.deadline = trio.current_time() + self.pong_timeout


@final
class _ExitWrite:
    """What of a socket's exit is still to be written, and whether all of it is out.

    The exit goes at once where the stream takes it (:func:`send_now`). What
    the stream did not take, and the close kept for the socket's close, wait
    here for :meth:`ProcessSocket.leave`; what it took but its socket did not
    (the rest of a TLS record) waits in the stream, to go first with its
    next write: either way the socket must not close before they are out.
    """

    __slots__ = ("close_frame", "kept", "unsent", "written")

    def __init__(self) -> None:
        self.unsent = b""
        self.close_frame = b""
        # The stream took the whole exit and keeps part of it (its next write sends it).
        self.kept = False
        # Set once the exit (and its close, unless kept) is out whole: the socket may close then.
        self.written = False

    def now(self, now: SocketNow, data: bytes) -> bool:
        """Write ``data`` at once, without a checkpoint; whether it is out whole.

        False also when the stream cannot take it (closed, broken).
        """
        try:
            sent = now.send(data)
        except (OSError, trio.BrokenResourceError):
            return False
        self.unsent = data[sent:]
        self.kept = not self.unsent and bool(now.unsent_size())
        self.written = not self.unsent and not self.kept
        return self.written

    def take(self, frames: tuple[bytes, bytes], *, keep_close: bool) -> bytes:
        """The exit frame to write, and its close unless ``keep_close`` (kept for the close)."""
        exit_frame, close_frame = frames
        if keep_close:
            self.close_frame = close_frame
            return exit_frame
        return exit_frame + close_frame

    def send_close(self, stream: trio.abc.Stream) -> None:
        """Write the close kept for the socket's close once the exit is out whole; no checkpoint."""
        close_frame, self.close_frame = self.close_frame, b""
        if close_frame and self.written:
            with contextlib.suppress(OSError):
                send_now(stream, close_frame)

    def rest(self) -> bytes | None:
        """What is still to be sent of an exit begun at once, with its close; None: nothing.

        ``b""`` when only what the stream keeps remains (a write of nothing sends it).
        """
        if not self.unsent and not self.kept:
            return None
        data = self.unsent + self.close_frame
        self.unsent, self.close_frame, self.kept = b"", b"", False
        return data


@final
class ProcessSocket:
    """One open process socket: the stream, its wsproto connection and its clock.

    A :class:`~letagents_trio.ProcessStream`: iterated, it yields
    :class:`StreamNews` until the socket ends; the exit goes over it.

    Cancellation:
        Each step of the iteration is a checkpoint (the wait for the next
        bytes); cancelled, the socket is no longer usable and its owner
        closes it (:meth:`aclose`).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        ws: Connection,
        *,
        ping_interval: float,
        pong_timeout: float,
        max_event_bytes: int,
        announce_exit: Callable[[str | None], Awaitable[bool]],
    ) -> None:
        self._stream = stream
        # The stream written, drained and closed at once, when its socket allows.
        self._now = socket_now(stream)
        self._reads = QuietReads(stream)
        # POSTs the exit (the room client's, for this socket's session): for an
        # exit the socket cannot carry, or one its room should have answered.
        self._announce_exit = announce_exit
        self._ws = ws
        self._liveness = _Liveness(ping_interval, pong_timeout)
        self._bounds, self._edges = FrameBounds(max_event_bytes, ping_interval), FrameEdges()
        self._finished, self._reply = False, b""
        # What of the exit is still to go once it began at once (leave sends it).
        self._exit_write = _ExitWrite()
        self._send_lock = trio.Lock()
        self.connection_id: str | None = None
        # The exit naming connection_id, ready to be written (see _exit_bytes).
        self._exit: tuple[bytes, bytes] = (b"", b"")
        # Set once the exit frame is on its way: no more news, nothing more sent.
        self.leaving = False
        # Set by close(): nothing more can come or go. A reader waiting to be
        # stopped after the exit (see _leave) waits on _close_waiter meanwhile.
        self._closed = False
        self._close_waiter: trio.Event | None = None
        # Set once close() closed the stream itself: a later close has nothing to do.
        self._shut = False
        # The room said (in its open frame) that it acknowledges exits; the
        # connection the exit named, and the room's answer once it came.
        self.exit_ack = False
        self._exit_names: str | None = None
        self.exit_recorded: bool | None = None
        # Set once nothing more can be heard of the exit: answered, closed or finished.
        self._exit_settled = trio.Event()

    def __aiter__(self) -> ProcessSocket:
        return self

    async def __anext__(self) -> StreamNews:
        # _news took every event of each chunk read: only _exit_bytes leaves any.
        news = self._news() if self.leaving else None
        while news is None:
            if self._finished:
                await self._flush()
                raise StopAsyncIteration
            data = b""
            try:
                data = await self._receive()
            except RoomUnreachable:
                # After the exit frame a broken or closed socket is expected.
                if not self.leaving:
                    raise
            if self.leaving:
                if self.exit_ack and data and not self._closed:
                    # The room answers the exit: its acknowledgement, or its close.
                    self._ws.receive_data(data)
                    if self._answered():
                        raise StopAsyncIteration
                    continue
                if not data and not self._closed:
                    # The room hung up (or the socket broke): no answer comes now.
                    self._finished = True
                    self._exit_settled.set()
                await self._leave(answered=bool(data))
            if data:
                # Every chunk is news, a ping included: it re-arms the holder's silence.
                news = self._news(data) or NOTHING_NEW
            else:
                self._ws.receive_data(None)
                self._finished = True
        return news

    def _news(self, data: bytes = b"") -> StreamNews | None:
        """The news in ``data`` and the events wsproto has; None when there is none."""
        opened = self._ws.state is ConnectionState.OPEN
        if opened and (pong := self._edges.heartbeat_pong(data, self._bounds)):
            self._reply += pong
            return NOTHING_NEW
        heard = read_news(self._ws, self._bounds, data)
        if heard is None:
            return None
        self._reply += heard.reply
        self._finished = self._finished or heard.closed
        self.exit_ack = self.exit_ack or heard.exit_ack
        if heard.connection_id is not None:
            self.connection_id = heard.connection_id
            # Made now rather than at the goodbye, which writes thousands of them.
            self._exit = exit_frames(heard.connection_id)
        return heard.news

    @property
    def heard_at(self) -> float:
        """When the room's latest bytes arrived (trio's clock): kept by the kernel, or just read."""
        return self._liveness.heard_at

    async def _receive(self) -> bytes:
        """Read one chunk, pinging after ``ping_interval`` of silence."""
        await self._flush()
        while True:
            # Once the room has named the connection, while no pong is awaited
            # and no exit answer: a lone ping may wait in the kernel for the
            # next one (see _KEPT_BYTES), and both are answered then.
            liveness = self._liveness
            quiet = self.connection_id is not None and not liveness.awaiting_pong
            keep = self._reads.wire_size(_KEPT_BYTES) if quiet and not self.leaving else 0
            try:
                data = await self._reads.read_by(_RECEIVE_BYTES, liveness.deadline, keep=keep)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                if self._closed and self.leaving:
                    # Closed after the exit (close()): the end expected, told as one.
                    return b""
                raise RoomUnreachable(f"process socket broke: {type(exc).__name__}") from exc
            if data is not None:
                liveness.heard(self._reads.heard_at)
                return data
            if liveness.awaiting_pong or self.leaving:
                raise RoomUnreachable("process socket: no pong within the pong timeout")
            if self._ws.state is ConnectionState.OPEN:
                self._reply += self._ws.send(Ping())
            await self._flush()
            liveness.pinged()

    async def _flush(self) -> None:
        """Send the pongs and pings (or the close echo) waiting to go.

        Written at once when the socket takes them (its :class:`SocketNow`: a
        pong is one small write), else in turn with any other sender, waiting
        at most the pong timeout for the room to take them: a room that
        stopped reading would otherwise hold the reader until the holder's
        silence deadline, its own pings unanswered meanwhile.

        Raises:
            RoomUnreachable: the socket broke, or the room took nothing within
                the pong timeout (part of a frame may be out: the socket is done).
        """
        data, self._reply = self._reply, b""
        if not data or self.leaving:
            return
        try:
            if self._now is not None and not self._send_lock.locked():
                data = data[self._now.send(data) :]
                if not data:
                    return
            with trio.move_on_after(self._liveness.pong_timeout) as waited:
                async with self._send_lock:
                    await self._stream.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise RoomUnreachable(f"process socket broke: {type(exc).__name__}") from exc
        if waited.cancelled_caught:
            raise RoomUnreachable("process socket: the room took nothing within the pong timeout")

    def _exit_bytes(self, connection_id: str | None) -> tuple[bytes, bytes] | None:
        """Mark the socket leaving; the exit frame and a normal close, serialized apart.

        None when the socket cannot take them (already leaving, finished, closing).
        From here on the reader sends nothing more: no pong may follow the close.
        The frames naming the connection the room opened were made when it
        named it; others (an exit naming none) are made here.
        """
        if self.leaving or self._finished or self._ws.state is not ConnectionState.OPEN:
            return None
        self.leaving = True
        self._exit_names = connection_id
        if self.exit_ack:
            # The room's answer must wake the reader, however small; pings the
            # kernel kept go to the parser now (they are not answered now).
            kept = self._reads.loud()
            if kept:
                self._ws.receive_data(kept)
        if connection_id is not None and connection_id == self.connection_id:
            return self._exit
        return exit_frames(connection_id)

    def _write_now(self, connection_id: str | None, *, close: bool) -> bool | None:
        """Write the exit frame (and, when ``close``, a normal close) without a checkpoint.

        Returns:
            True when what was to be written is out whole. None when
            nothing can be written at once and nothing was done (a stream
            :func:`send_now` cannot write, or a pong is on its way). False
            otherwise: the socket cannot take the exit (closed, broken), or
            the kernel took only part of it (over TLS, part of its record),
            and :meth:`leave` must send the rest before the socket closes.
        """
        now = self._now
        if now is None or self._send_lock.locked():
            return None
        frames = self._exit_bytes(connection_id)
        if frames is None:
            return False
        return self._exit_write.now(now, self._exit_write.take(frames, keep_close=not close))

    def leave_nowait(self, connection_id: str) -> bool | None:
        """Write the exit at once, without a checkpoint, when the socket takes it.

        Returns:
            None when the exit is done: to a room that does not acknowledge
            exits, the exit frame and its normal close go in one write and
            the socket closes right after (:meth:`close`): the room's answer
            to the close finds no reader to wake, and the reader wakes once,
            to end (the holder, leaving, stops). True when the exit frame is
            written alone, to a room that acknowledges exits: its close goes
            as the socket closes (:meth:`aclose`), after the room's answer,
            which :meth:`leave` waits for. False, having done nothing
            :meth:`leave` cannot follow, when the stream cannot be written at
            once (:func:`send_now`: a plain socket, or the lean path's TLS
            over one, can), a pong is on its way, or the kernel took only
            part of the exit (:meth:`leave` sends the rest).
        """
        if self.exit_ack:
            return bool(self._write_now(connection_id, close=False))
        if not self._write_now(connection_id, close=True):
            return False
        self.close()
        return None

    async def leave(self, connection_id: str) -> bool | None:
        """The exit over this socket; the room's answer, or None where none comes.

        The exit frame and a normal close, at once when the socket takes
        them, else in turn with the reader's pongs (or the rest of an exit
        :meth:`leave_nowait` wrote in part). To a room that acknowledges exits
        the close waits for its answer, which is awaited until it comes or
        the socket closes. An exit the socket cannot carry (it is closed,
        broken, or its room does not read), and one the room hung up on
        without an answer, is POSTed, through the room client: its answer is
        the POST's.

        Returns:
            The room's answer; None when the exit went over the socket and
            no answer came: a room that does not acknowledge exits, or a
            socket closed by its holder (stopped by the goodbye when the
            answers were due, which then POSTs the exit itself).

        Raises:
            ApiError: the room refused the POSTed exit.
            RoomUnreachable: it could not be POSTed.

        Cancellation:
            A checkpoint; under the goodbye's deadline, which may cancel it.
        """
        if not self._exit_write.written and not await self._send_exit(connection_id):
            await self.aclose()
            return await self._announce_exit(connection_id)
        if not self.exit_ack:
            await self.aclose()
            return None
        if self.exit_recorded is None and not self._exit_settled.is_set():
            await self._exit_settled.wait()
        else:
            await trio.lowlevel.checkpoint()
        if self.exit_recorded is None and self._finished:
            # The room closed (or the socket broke) without an answer: POSTed as well.
            await self.aclose()
            return await self._announce_exit(connection_id)
        return self.exit_recorded

    async def _send_exit(self, connection_id: str) -> bool:
        """Send the exit frame and a normal close; whether the socket took them.

        At once when it can; what the kernel could not take at once (or all
        of it on a stream that cannot be written so, or the rest of a
        :meth:`leave_nowait` cut short, with the close it kept) goes out
        in turn with the reader's pongs.

        Cancellation:
            A checkpoint; under the caller's exit deadline.
        """
        # A room that acknowledges the exit answers before the close: the
        # close waits for the socket's close, after the answer.
        sent = self._write_now(connection_id, close=not self.exit_ack)
        if sent:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return True
        if sent is None and self._send_lock.locked() and self._now is not None:
            # On a stream written at once a pong takes the lock only when the
            # kernel would not take it at once: the room does not read, and the
            # exit could not get through either, so it is POSTed instead.
            await trio.lowlevel.checkpoint()
            return False
        # The rest of an exit the kernel took only part of, here or in
        # leave_nowait (which kept the close for the socket's close): both go now.
        data = self._exit_write.rest()
        if data is None and sent is None:
            frames = self._exit_bytes(connection_id)
            if frames is not None:
                data = self._exit_write.take(frames, keep_close=self.exit_ack)
        if data is None:
            await trio.lowlevel.checkpoint()
            return False
        async with self._send_lock:
            try:
                # What the stream kept of the exit goes first (alone, for b"").
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return False
        self._exit_write.written = True
        return True

    def _answered(self) -> bool:
        """Read the room's answer to the exit from what it sent; whether the iteration is over.

        Over once the room acknowledged the exit (:attr:`exit_recorded`, for
        the connection the exit named) or closed; pings are not answered now.
        """
        recorded, closed = read_exit_answer(self._ws, self._bounds, self._exit_names)
        if recorded is not None:
            self.exit_recorded = recorded
        self._finished = self._finished or closed
        if self.exit_recorded is not None or self._finished:
            self._exit_settled.set()
            return True
        return False

    async def _leave(self, *, answered: bool) -> NoReturn:
        """The reader woke after the exit began: end the iteration, now or once the socket closes.

        - The socket was closed (:meth:`close`, by the holder leaving), or the
          exit is written whole and nothing more can come (the room closed
          the socket, or it broke, or stayed silent past the ping deadline):
          the iteration ends here, and the holder, which is leaving, stops in
          this one wake-up.
        - The room answered (its closing frame, or a ping that crossed the
          exit): the answer is not even parsed, and the reader waits to be
          stopped, or for the socket's close. The goodbye stops the holders
          once every exit that could go at once is written, so thousands of
          answers arriving meanwhile do not unwind thousands of holders
          between two exits.
        - The exit is still being written: the socket stays open for the
          writer, and the reader waits likewise.
        """
        if not self._closed and not (self._exit_write.written and not answered):
            self._close_waiter = waiter = trio.Event()
            await waiter.wait()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Close the socket: at once when it can be (:meth:`close`), else forcefully.

        Idempotent, and safe from another task than the reader's.

        Cancellation:
            Closes even when cancelled; a checkpoint only when :meth:`close`
            could not close the stream synchronously.
        """
        if not self.close():
            await trio.aclose_forcefully(self._stream)

    def close(self) -> bool:
        """Close the socket now, without a checkpoint; False when only the holder can.

        The reader waiting on it wakes, sees :attr:`leaving` and ends the
        iteration (the holder, leaving, stops), also when it was waiting to be
        stopped after the exit. After an exit, what the room sent meanwhile is
        read and dropped first, so that the close is an orderly end, not a
        reset that could cost the room the exit (see
        :func:`~letagents_trio._http.discard_unread`); after an exit written
        alone, its normal close goes first. Once it has closed the stream, a
        second call (the holder's block, leaving) does nothing more.
        """
        if self._shut:
            return True
        self._closed = True
        self._exit_settled.set()
        if self._close_waiter is not None:
            self._close_waiter.set()
        now = self._now
        if self.leaving:
            if now is not None:
                now.discard_unread()
            else:
                discard_unread(self._stream)
            self._exit_write.send_close(self._stream)
        if now is not None:
            now.close()
            self._shut = True
        else:
            self._shut = close_now(self._stream)
        return self._shut
