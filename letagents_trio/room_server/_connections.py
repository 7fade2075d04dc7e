"""Accepting connections: hypercorn's trio worker loop, with a cap on silent ones.

A connection is *silent* while it waits for a request head: from its accept
until the headers of its first request are complete, and again between two
requests on a kept-alive connection. That is exactly when hypercorn runs its
keep-alive timer for it (``PRE_REQUEST_TIMEOUT`` in :mod:`._serve`), which
closes each after a few seconds; but thousands of attackers opening such
connections hold thousands of descriptors meanwhile, until ``accept`` fails
and a legitimate client waits behind them. So at most ``limit`` silent
connections are kept (:class:`SilentConnections`): when one more falls
silent, the one silent longest is closed at once (its socket, so its
descriptor is free, and its task). Closing the oldest, never the newcomer,
keeps the door open: a client sends its request right after connecting.

A connection whose request head is complete is never counted, however long
it then lasts: a held process stream (one process on 127.0.0.1 may hold
10,000), a long poll, a WebSocket; a body still arriving has its own cap and
deadline (``RoomConfig.max_pending_bodies``, ``body_timeout``).

Hypercorn has no connection limit and no hook at accept time, so
:func:`serve_hypercorn` runs the loop of its trio worker
(``hypercorn.trio.run.worker_serve``) itself, for plain HTTP/1.1 and h2c only:
no TLS, no QUIC, no lifespan events (:func:`~._serve.serve_room` closes the
held streams itself), no worker restarts. Each connection is served by
hypercorn's own ``TCPServer``, subclassed to see the protocol's
``Updated(idle=...)`` events, the ones hypercorn's keep-alive timer follows,
to keep that timer in one task for the connection's life (:mod:`._idle`:
hypercorn starts a new one per request), to close an idle connection as
soon as its peer has closed it (hypercorn would wait for the keep-alive
timer), to write nothing (and not switch tasks) for an empty write, and to
take a send that races the connection's close (``BusyResourceError``) as
the close it is. A connection
that fails anyway is logged and closed; the server goes on.

A WebSocket upgrade hypercorn refuses itself (no ``Sec-WebSocket-Key``, a
version other than 13, HTTP/1.0, bytes sent before the answer) gets its ``400
Connection: close``, and then hypercorn neither closes the connection nor
counts it as idle: it waited for the client to leave, forever, holding a
descriptor no cap or timer reclaimed. Its read loop here closes such a
connection as soon as the answer is out (:meth:`_CountedTCPServer._read_data`).
Shutdown is hypercorn's: stop accepting, tell every connection the worker
is terminating (idle ones close), give the rest the graceful timeout.

Every write to a client is bounded. Hypercorn writes with ``send_all`` in a
shielded scope (a cancelled write would leave half a frame), so a client that
stops reading (a WebSocket client that pings and never reads the pongs, an SSE
client that never reads) held its connection's tasks in that write for ever:
its reader too (a pong is written from the read loop), so no disconnect ever
reached the app and the stream was never recorded as dropped, and the
server's stop, whose cancellation the shield kept out, never ended. Here each
write may wait ``send_timeout`` for the client to take it; past it the
connection is cut (its socket closed: the app sees the client gone, a held
stream is a drop). And at the stop's deadline every connection still open is
cut the same way, whatever its client does (:class:`_Open`).
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import attrs
import h11
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState, LifespanState
from hypercorn.utils import repr_socket_addr, wrap_app

from .._http import can_send_now, send_now
from ._idle import IdleTimer

if TYPE_CHECKING:
    from hypercorn.config import Config
    from hypercorn.typing import AppWrapper

__all__ = ["Closable", "SilentConnections", "serve_hypercorn"]

logger = logging.getLogger("letagents_trio.room_server")

# Under a flood the cap is reached thousands of times a second: say so once a minute.
EVICTION_LOG_INTERVAL: Final = 60.0
# The close code an app is told when its WebSocket's connection ended without a close frame.
ABNORMAL_CLOSURE: Final = 1006


class Closable(Protocol):
    """A connection as :class:`SilentConnections` sees it: something to close."""

    def close(self) -> None: ...


@final
@attrs.define(eq=False)
class _Connection:
    """One accepted connection: its stream, and the scope its server task runs in."""

    stream: trio.SocketStream
    scope: trio.CancelScope

    def close(self) -> None:
        # The socket first: a cancelled TCPServer would not reach its own
        # aclose (its send_eof checkpoint raises Cancelled first).
        self.stream.socket.close()
        self.scope.cancel(reason="too many silent connections")

    def cut(self) -> None:
        """Close the socket: a write or read waiting on it, shielded or not, ends at once."""
        self.stream.socket.close()


@final
@attrs.define(eq=False)
class _Open:
    """The connections open now, to cut those still open at the stop's deadline."""

    live: set[_Connection] = attrs.field(factory=set)
    _stopping: trio.Event | None = None

    def forget(self, connection: _Connection) -> None:
        self.live.discard(connection)
        if not self.live and self._stopping is not None:
            self._stopping.set()

    async def cut_when_cancelled(self) -> None:
        """Return once every connection has closed; cancelled first (the stop's deadline),
        cut every connection still open.

        Cancellation:
            The point of it: cancelled, it closes the sockets left, synchronously.
        """
        self._stopping = trio.Event()
        if not self.live:
            self._stopping.set()
        try:
            await self._stopping.wait()
        finally:
            # (A connection already closed may still have a task winding down:
            # hypercorn's WebSocket pinger notices a close at its next ping.)
            still_open = [c for c in self.live if c.stream.socket.fileno() != -1]
            if still_open:
                logger.warning(
                    "room stop: %d connections still open at the deadline were cut",
                    len(still_open),
                )
            for connection in still_open:
                connection.cut()


@final
@attrs.define(eq=False)
class SilentConnections:
    """The connections waiting for a request head, oldest first, at most ``limit``.

    Attributes:
        limit: silent connections kept at most; one more closes the oldest.
        evicted: connections closed so far for being the oldest at the cap.
    """

    limit: int = attrs.field(validator=attrs.validators.ge(1))
    evicted: int = 0
    _silent: dict[Closable, None] = attrs.field(factory=dict, init=False)
    _logged_at: float = attrs.field(default=-EVICTION_LOG_INTERVAL, init=False)

    def __len__(self) -> int:
        return len(self._silent)

    def fell_silent(self, connection: Closable) -> None:
        """Count ``connection`` as the newest silent one, closing the oldest at the cap."""
        self._silent.pop(connection, None)
        while len(self._silent) >= self.limit:
            oldest = next(iter(self._silent))
            del self._silent[oldest]
            self.evicted += 1
            oldest.close()
            now = trio.current_time()
            if now - self._logged_at >= EVICTION_LOG_INTERVAL:
                self._logged_at = now
                logger.warning(
                    "silent connections at the cap (%d): closing the oldest (%d so far)",
                    self.limit,
                    self.evicted,
                )
        self._silent[connection] = None

    def spoke(self, connection: Closable) -> None:
        """``connection`` sent a request head: it no longer counts."""
        self._silent.pop(connection, None)

    def forget(self, connection: Closable) -> None:
        """``connection`` is closed: it no longer counts."""
        self._silent.pop(connection, None)


class _CountedTCPServer(TCPServer):
    """Hypercorn's connection server, reporting when its connection is idle."""

    def __init__(
        self,
        app: AppWrapper,
        config: Config,
        context: WorkerContext,
        state: LifespanState,
        connection: _Connection,
        silent: SilentConnections,
        send_timeout: float,
    ) -> None:
        # Typed for TLS streams; it uses a plain one as its trio worker does.
        super().__init__(app, config, context, state, connection.stream)  # type: ignore[arg-type]
        # One task a connection, not one a request (see ._idle).
        self._idle = IdleTimer(
            config.keep_alive_timeout, context.terminated, self._initiate_server_close
        )
        self.idle_task = self._idle
        self._connection = connection
        self._silent = silent
        self._send_timeout = send_timeout

    async def _read_data(self) -> None:
        """Hypercorn's read loop, which also ends a refused upgrade's connection."""
        while True:
            try:
                with trio.fail_after(self.config.read_timeout or math.inf):
                    data = await self.stream.receive_some(MAX_RECV)
            except (trio.ClosedResourceError, trio.BrokenResourceError, trio.TooSlowError):
                break
            try:
                await self.protocol.handle(RawData(bytes(data)))
            except h11.LocalProtocolError:
                # Two answers raced for one upgrade: hypercorn's 400 to bytes
                # sent before the answer, and the app's own (which hypercorn
                # let through between the 400's head and its end). Either way
                # the client is refused, and the connection unusable.
                upgrade = self._upgrade()
                if upgrade is None:
                    raise
                logger.debug("an upgrade was answered twice; closing its connection")
                await self._end_upgrade(upgrade)
                break
            if not data:
                break
            upgrade = self._upgrade()
            if upgrade is not None and upgrade.closed:
                # Hypercorn refused it (and marked it closed), then would wait for the peer.
                await self._end_upgrade(upgrade)
                break
        await self.protocol.handle(Closed())
        # The peer closed (or the socket did): nothing more can arrive. Left
        # alone, hypercorn keeps an idle connection, descriptor and task, until
        # its keep-alive timer fires (5 s), so attackers who leave would hold
        # the room's descriptors that long; ending the timer closes it now.
        self._idle.end()

    def _upgrade(self) -> WSStream | None:
        """The WebSocket upgrade this HTTP/1.1 connection carries, if it carries one."""
        protocol = self.protocol.protocol
        if isinstance(protocol, H11Protocol) and isinstance(protocol.stream, WSStream):
            return protocol.stream
        return None

    async def _end_upgrade(self, upgrade: WSStream) -> None:
        """End the connection of a refused upgrade at once.

        Its socket is closed here, so its descriptor is free now (hypercorn
        would keep it until the peer left). If the app was already told of
        the upgrade (bytes came before the answer), it is told the client went
        away, so a process stream it opened is let go as a drop rather than
        held for a connection that is gone.
        """
        self._connection.stream.socket.close()
        if not upgrade.closed:
            # Interrupted mid-answer: hypercorn marks it closed, then tells the app.
            await self.protocol.handle(Closed())
        elif upgrade.app_put is not None:
            await upgrade.app_put({"type": "websocket.disconnect", "code": ABNORMAL_CLOSURE})

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            if event.idle:
                self._silent.fell_silent(self._connection)
            else:
                self._silent.spoke(self._connection)
        elif isinstance(event, RawData):
            if not event.data:
                # The end of a body of known length, say: nothing to write, and
                # no task switch for it (every answer has one).
                return
            try:
                await self._send_raw(event.data)
            except (trio.BusyResourceError, trio.ClosedResourceError):
                # Busy: hypercorn sends EOF outside its send lock, so a send
                # racing a close (an answer, or its own 400 to a client that
                # closed mid-body) found the stream busy: the connection is
                # closing, as if the send had found it closed. Unhandled, it
                # stopped the whole server (or was logged as the app's error).
                await self.protocol.handle(Closed())
            return
        await super().protocol_send(event)

    async def _send_raw(self, data: bytes) -> None:
        """Hypercorn's send, except that a connection the peer broke is left to the reader.

        A peer that reset the connection (a client that closed its socket with
        bytes unread, say a heartbeat) may have sent something just before,
        still unread here: a WebSocket's exit frame and close. Hypercorn would
        declare the connection closed at once, and the app would see the
        disconnect before that frame: the exit lost. The reader reads what is
        left, then the end, and closes the connection itself, at once, since
        the connection is broken. Thousands of WebSockets saying goodbye at
        once lost exits that way (``docs/performance.md``).

        The common case, a kernel that takes the bytes at once with no other
        sender waiting, is one write and no task switch
        (:func:`~letagents_trio._http._sockio.send_now`): a goodbye is a
        thousand answers written at once. Otherwise the rest waits its turn and
        at most ``send_timeout`` for the client to take it: past that, the
        client stopped reading and its connection is cut (see the module
        docstring).

        Raises:
            trio.ClosedResourceError: the connection was cut (here, or at the
                stop's deadline) or closed.

        Cancellation:
            The write is shielded, as in hypercorn's own send: bytes half
            written would break the connection's framing; the send timeout
            and the stop's cut bound it instead.
        """
        lock = self.send_lock
        if not lock.locked() and can_send_now(self.stream) and self.stream.socket.fileno() != -1:
            try:
                sent = send_now(self.stream, data)
            except OSError:
                sent = len(data)  # the peer broke it: left to the reader
            if sent == len(data):
                await trio.lowlevel.cancel_shielded_checkpoint()
                return
            if sent:
                # Part of a frame is out: the rest follows before anyone else's bytes.
                lock.acquire_nowait()
                try:
                    await self._send_bounded(data[sent:])
                finally:
                    lock.release()
                return
        async with lock:
            await self._send_bounded(data)

    async def _send_bounded(self, data: bytes) -> None:
        """``send_all`` shielded, for at most ``send_timeout``; then cut (holding the lock)."""
        with trio.CancelScope(shield=True) as scope:
            scope.relative_deadline = self._send_timeout
            try:
                await self.stream.send_all(data)
            except trio.BrokenResourceError:
                return
        if scope.cancelled_caught:
            logger.info("a client took nothing for %s s: its connection is cut", self._send_timeout)
            self._connection.cut()
            raise trio.ClosedResourceError("the client stopped reading")


async def serve_hypercorn(
    app: Any,
    config: Config,
    *,
    max_silent: int,
    send_timeout: float,
    stop: trio.Event,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an ASGI app on ``config.bind`` until ``stop`` is set, then stop gracefully.

    Args:
        app: the ASGI 3 application.
        config: hypercorn's settings (``bind``, ``backlog``, timeouts, logs...).
        max_silent: connections kept at most without a request (:class:`SilentConnections`).
        send_timeout: seconds a write may wait for its client to take it; then
            the connection is cut.
        stop: set to stop accepting and close gracefully.
        task_status: receives the bound URLs, e.g. ``["http://127.0.0.1:3001"]``.

    Cancellation:
        Stopping takes up to ``config.graceful_timeout`` (open requests finish),
        then cuts every connection still open; cancelled, it cuts every
        connection at once, whatever its client does.
    """
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    context = WorkerContext(None)
    state = ConnectionState({})
    silent = SilentConnections(max_silent)
    open_now = _Open()
    listeners: list[trio.SocketListener] = []
    binds: list[str] = []
    for sock in config.create_sockets().insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")

    async def serve_connection(stream: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            connection = _Connection(stream, scope)
            open_now.live.add(connection)
            silent.fell_silent(connection)
            server = _CountedTCPServer(
                wrapped, config, context, state, connection, silent, send_timeout
            )
            try:
                await server.run()
            except Exception:
                # One connection's failure is a bug to log, never a reason
                # for every other connection, and the server, to stop.
                logger.exception("connection failed; closing it")
                stream.socket.close()
            finally:
                silent.forget(connection)
                open_now.forget(connection)

    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            accepting.start_soon(
                partial(
                    trio.serve_listeners, serve_connection, listeners, handler_nursery=connections
                )
            )
            task_status.started(binds)
            await stop.wait()
            accepting.cancel_scope.cancel(reason="the server is stopping")
        await context.terminated.set()
        connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        connections.start_soon(open_now.cut_when_cancelled)
