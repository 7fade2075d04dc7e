"""Serve a :class:`Room` over TCP with hypercorn's trio worker.

:func:`serve_room` binds (port 0 picks a free port), reports the URL through
``task_status.started(url)``, runs the liveness sweep beside the server, and
serves until cancelled. Cancellation is turned into a graceful stop, as
upstream's server does on restart:

1. every held process stream is closed silently (nothing is recorded; the
   clients see the stream end, count it as ``dropped`` and reconnect);
2. hypercorn's shutdown trigger fires, so it stops accepting and gives open
   requests up to :data:`GRACEFUL_TIMEOUT` to finish (long polls included);
3. a hard backstop, :data:`SHUTDOWN_TIMEOUT`, bounds the whole stop.

Hypercorn runs inside a shielded scope so that the caller's cancellation
reaches it only as the shutdown trigger, never as a mid-write cancel.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Final, NoReturn

import trio
from hypercorn.config import Config

from ._app import create_app
from ._connections import serve_hypercorn

if TYPE_CHECKING:
    from ._room import Room

__all__ = ["GRACEFUL_TIMEOUT", "PRE_REQUEST_TIMEOUT", "SHUTDOWN_TIMEOUT", "serve_room"]

logger = logging.getLogger("letagents_trio.room_server")

# Open requests get this long to finish once the server stops accepting: a
# poll or a registration in flight can answer, a held stream is already closed.
LISTEN_BACKLOG: Final = 4096
GRACEFUL_TIMEOUT: Final = 2.0
# The whole stop never takes longer than this, whatever a connection does.
SHUTDOWN_TIMEOUT: Final = 5.0
# A connection that has not sent a complete request head this long after it
# opened (or after its last answer) is closed: hypercorn's keep-alive timeout,
# which covers idle and slow-header connections alike. Bodies have their own
# deadline in the app (RoomConfig.body_timeout). hypercorn's read_timeout stays
# None: it bounds every read of a connection, so it would cut the process
# streams and long polls, whose clients rightly send nothing while they wait.
PRE_REQUEST_TIMEOUT: Final = 5.0
# A client's frames on the process socket are exit announcements (~100 bytes).
MAX_SOCKET_MESSAGE: Final = 64 * 1024


async def _run_hypercorn(
    room: Room,
    config: Config,
    stop: trio.Event,
    backstop: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    with backstop:
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(
                partial(
                    serve_hypercorn,
                    create_app(room),
                    config,
                    max_silent=room.config.silent_connections_cap(),
                    send_timeout=room.config.send_timeout,
                    stop=stop,
                )
            )
            task_status.started(binds)
    if backstop.cancelled_caught:
        logger.warning("room stop took over %s s: open connections were cut", SHUTDOWN_TIMEOUT)
    else:
        logger.info("http server stopped")


async def serve_room(
    room: Room,
    *,
    host: str = "127.0.0.1",
    port: int = 3001,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve ``room`` over HTTP until cancelled, then stop gracefully.

    Args:
        room: the room to serve.
        host: the address to bind (loopback by default).
        port: the port; 0 picks a free one.
        task_status: receives the bound URL, e.g. ``"http://127.0.0.1:3001"``.

    Cancellation:
        Serves until cancelled. Cancelled, it closes every held process stream
        silently, stops accepting, lets open requests finish for up to
        :data:`GRACEFUL_TIMEOUT` seconds, and returns (re-raising the
        cancellation) within :data:`SHUTDOWN_TIMEOUT` seconds.
    """
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = GRACEFUL_TIMEOUT
    # A process restarting with thousands of sessions reconnects them all at
    # once; hypercorn's default backlog (100) would drop most of those SYNs.
    config.backlog = LISTEN_BACKLOG
    config.keep_alive_timeout = PRE_REQUEST_TIMEOUT
    # The WebSocket form of the process stream (docs/protocol.md §3.1): the
    # server pings every heartbeat interval (ASGI apps cannot), and no client
    # frame of that form needs more than a few hundred bytes.
    config.websocket_ping_interval = room.config.heartbeat_interval
    config.websocket_max_message_size = MAX_SOCKET_MESSAGE
    config.accesslog = None
    config.errorlog = logging.getLogger("letagents_trio.room_server.http")
    stop = trio.Event()
    backstop = trio.CancelScope(shield=True)
    async with trio.open_nursery() as nursery:
        # The room first: it closes the connections left open by its last run.
        await nursery.start(room.run)
        binds: list[str] = await nursery.start(
            partial(_run_hypercorn, room, config, stop, backstop)
        )
        url = binds[0]
        logger.info("room serving on %s", url)
        task_status.started(url)
        try:
            await trio.sleep_forever()
        finally:
            logger.info("room on %s stopping", url)
            room.close_all_process_streams()
            stop.set()
            backstop.deadline = trio.current_time() + SHUTDOWN_TIMEOUT
