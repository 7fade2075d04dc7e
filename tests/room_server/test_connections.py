"""The cap on silent connections (issue 13, row 6): which connection is closed, and when;
and a send racing a connection's close (rows 6 and 14).

:class:`SilentConnections` is pure bookkeeping over things with a ``close()``;
the served form is tested over loopback in ``tests/e2e/test_room_connections.py``.
"""

from __future__ import annotations

import logging
import resource
from typing import Any, cast

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import wrap_app

from letagents_trio.room_server import RoomConfig
from letagents_trio.room_server._config import (
    MAX_SILENT_CONNECTIONS,
    SEND_TIMEOUT,
    default_silent_connections,
)
from letagents_trio.room_server._connections import (
    EVICTION_LOG_INTERVAL,
    SilentConnections,
    _Connection,
    _CountedTCPServer,
)


@attrs.define(eq=False)
class Fake:
    name: str
    closed: bool = False

    def close(self) -> None:
        assert not self.closed, f"{self.name} closed twice"
        self.closed = True


def fakes(*names: str) -> list[Fake]:
    return [Fake(name) for name in names]


def closed(connections: list[Fake]) -> list[str]:
    return [c.name for c in connections if c.closed]


def test_the_default_cap_and_the_config_refuses_a_cap_under_one() -> None:
    assert RoomConfig().max_silent_connections is None
    assert RoomConfig(max_silent_connections=7).silent_connections_cap() == 7
    with pytest.raises(ValueError, match="max_silent_connections"):
        RoomConfig(max_silent_connections=0)
    with pytest.raises(ValueError, match="limit"):
        SilentConnections(0)


@pytest.mark.parametrize(
    ("open_files", "cap"),
    [(100, 256), (1024, 256), (1028, 257), (20_000, 5000), (1 << 30, 1 << 18)],
)
def test_the_default_cap_is_a_quarter_of_the_open_file_limit_and_never_under_256(
    open_files: int, cap: int
) -> None:
    """A fixed 256 cut 261 of 3,000 process sockets opened at once (a room's
    restart under 3,000 held sessions) on a room with 20,000 descriptors."""
    assert MAX_SILENT_CONNECTIONS == 256
    assert default_silent_connections(open_files) == cap


def test_a_served_room_takes_the_default_cap_from_its_own_open_file_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = {"soft": 8192}
    monkeypatch.setattr(resource, "getrlimit", lambda _: (limits["soft"], 1 << 20))
    assert RoomConfig().silent_connections_cap() == 2048
    assert default_silent_connections() == 2048
    limits["soft"] = resource.RLIM_INFINITY
    assert default_silent_connections() == 1 << 18


async def test_the_oldest_silent_connection_is_closed_never_the_newcomer() -> None:  # noqa: ASYNC124 (trio's clock times the log)
    silent = SilentConnections(3)
    a, b, c, d, e = connections = fakes("a", "b", "c", "d", "e")
    for connection in (a, b, c):
        silent.fell_silent(connection)
    assert closed(connections) == []
    assert len(silent) == 3
    silent.fell_silent(d)
    assert closed(connections) == ["a"]
    assert len(silent) == 3
    silent.fell_silent(e)
    assert closed(connections) == ["a", "b"]
    assert silent.evicted == 2


async def test_a_connection_that_spoke_is_not_counted_until_it_is_idle_again() -> None:  # noqa: ASYNC124 (trio's clock times the log)
    silent = SilentConnections(2)
    a, b, c, d = connections = fakes("a", "b", "c", "d")
    silent.fell_silent(a)
    silent.fell_silent(b)
    silent.spoke(a)  # a's request head is complete: a held stream, say
    silent.fell_silent(c)
    assert closed(connections) == []
    assert len(silent) == 2
    # b answered and kept alive: silent again, and now the newest.
    silent.spoke(b)
    silent.fell_silent(b)
    silent.fell_silent(d)
    assert closed(connections) == ["c"]
    silent.forget(b)
    silent.forget(b)  # a closed connection may be forgotten twice
    assert len(silent) == 1


async def test_held_streams_are_never_closed_however_many() -> None:  # noqa: ASYNC124 (trio's clock times the log)
    silent = SilentConnections(2)
    streams = fakes(*(f"stream{i}" for i in range(1000)))
    for stream in streams:
        silent.fell_silent(stream)
        silent.spoke(stream)
    attackers = fakes(*(f"attacker{i}" for i in range(10)))
    for attacker in attackers:
        silent.fell_silent(attacker)
    assert closed(streams) == []
    assert closed(attackers) == [f"attacker{i}" for i in range(8)]


async def test_evictions_are_logged_once_an_interval(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    caplog.set_level(logging.WARNING, "letagents_trio.room_server")
    silent = SilentConnections(1)
    for connection in fakes(*(str(i) for i in range(5))):
        silent.fell_silent(connection)
    assert [r.getMessage() for r in caplog.records] == [
        "silent connections at the cap (1): closing the oldest (1 so far)"
    ]
    await trio.sleep(EVICTION_LOG_INTERVAL)
    silent.fell_silent(Fake("late"))
    assert caplog.records[-1].getMessage().endswith("(5 so far)")
    assert len(caplog.records) == 2


@attrs.define
class Recorder:
    """Hypercorn's protocol, as the connection server talks to it."""

    events: list[object] = attrs.field(factory=list)

    async def handle(self, event: object) -> None:
        self.events.append(event)


@attrs.define
class ClosingStream:
    """A stream being closed: by another task sending EOF (trio refuses a
    concurrent send), or by this side already."""

    error: type[Exception]

    async def send_all(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint()
        raise self.error("this stream is closing")


@pytest.mark.parametrize("error", [trio.BusyResourceError, trio.ClosedResourceError])
async def test_a_send_that_races_the_close_is_taken_as_the_close(error: type[Exception]) -> None:
    """Hypercorn sends EOF outside its send lock; a send meeting it raised
    BusyResourceError out of the connection, which stopped the whole server
    under a slow-body flood (and was logged as the app's error on the 413 path)."""
    server = counted_server(ClosingStream(error))
    recorder = Recorder()
    server.protocol = cast("Any", recorder)
    await server.protocol_send(RawData(data=b"HTTP/1.1 408 Request Timeout\r\n"))
    assert recorder.events == [Closed()]


@attrs.define
class BrokenStream:
    """A stream whose peer reset the connection: every send fails."""

    async def send_all(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint()
        raise trio.BrokenResourceError("socket connection broken: [Errno 32] Broken pipe")


@attrs.define
class StuckStream:
    """A socket whose client stopped reading: a send waits for ever, until the socket closes."""

    closed: list[bool] = attrs.field(factory=list)

    @property
    def socket(self) -> StuckStream:
        return self

    def close(self) -> None:
        self.closed.append(True)

    async def send_all(self, data: bytes) -> None:
        await trio.sleep_forever()


async def test_a_client_that_stops_reading_is_cut_after_the_send_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The write is shielded (half a frame would break the framing), but bounded: past the
    send timeout the socket is closed and the app told the client is gone."""
    stream = StuckStream()
    server = counted_server(stream)
    recorder = Recorder()
    server.protocol = cast("Any", recorder)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.protocol_send, RawData(data=b"pong"))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel(reason="a cancellation does not cut a shielded write short")
    assert trio.current_time() == SEND_TIMEOUT
    assert stream.closed == [True]
    assert recorder.events == [Closed()]


def counted_server(stream: Any) -> _CountedTCPServer:
    config = Config()
    app: Any = None  # never called
    return _CountedTCPServer(
        wrap_app(app, config.wsgi_max_body_size, "asgi"),
        config,
        WorkerContext(None),
        ConnectionState({}),
        _Connection(stream, trio.CancelScope()),
        SilentConnections(1),
        SEND_TIMEOUT,
    )


async def test_a_send_the_peer_broke_leaves_the_close_to_the_reader() -> None:
    """What the peer sent before its reset (a WebSocket's exit frame) is still read.

    Hypercorn took a failed send for the end of the connection at once, so
    the app saw the disconnect before the frames still waiting in the socket:
    at 10,000 sockets saying goodbye, one exit in eleven was lost that way.
    """
    server = counted_server(BrokenStream())
    recorder = Recorder()
    server.protocol = cast("Any", recorder)
    await server.protocol_send(RawData(data=b"heartbeat"))
    assert recorder.events == []
