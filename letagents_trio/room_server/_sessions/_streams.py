"""Process streams (R4, PROTOCOL.md §2.2, §3): the held connections and their rules.

A :class:`ProcessStream` is one held ``GET …/process`` connection, over
Server-Sent Events or over a WebSocket (our extension): the registry does not
care which. The
:class:`StreamRegistry` opens them (authenticated, §2.2 steps 1-4), serves
them, records announced exits (R5), and holds the open ones per session, in
opening order, so the room can close them: ``"ended"`` writes ``event:
ended`` first (the session ended); ``"replaced"`` and ``"shutdown"`` close
silently and record nothing; ``"dropped"`` is the client gone away, and
records ``process_disconnected_at``. The first mode asked for wins.

:func:`serve_stream` writes the stream in a :class:`StreamForm`: the opening
(SSE: ``: connected`` and ``event: open`` with the connection id; WebSocket: an
``open`` text frame), a heartbeat every heartbeat interval (SSE only: a
WebSocket server pings on its own) and a refresh every refresh interval, until
the stream is asked to close, then the ``ended`` frame if the session ended.
An exit announced over the socket itself (:meth:`StreamRegistry.record_socket_exit`)
is recorded under the same rule as ``POST …/process/exit``. The evidence each step
leaves on the session row is a pure function here, given the row and the time:

* :func:`opened`: ``process_seen_at`` now, a new ``process_connection_id``, no
  ``process_disconnected_at`` (§2.2 step 4);
* :func:`refresh_outcome`: the 30 s refresh keeps ``process_seen_at`` moving,
  or says how to close (the session ended, or a newer connection replaced
  this one; §2.2 step 5);
* :func:`dropped`: the client went away from the current connection of a live
  session (§2.2 step 6);
* :func:`exit_recorded`: an announced exit (R5) is recorded when it names the
  current connection, or names none after a recorded drop;
* :func:`closed_at_start`: a room that starts (again) holds no connection, so
  a row that says one is open lost it when the room stopped: it is closed as a
  drop at the start, and the gone rules of §7.2 run from there
  (:meth:`StreamRegistry.close_unheld`, run by ``Room.run``). Without it a
  room killed mid-goodbye left every exit it had not recorded looking
  connected, its name held until the 10-minute silence rule.

Writes that only keep evidence fresh (the refresh, a drop) are best-effort:
a storage that refuses them (a full disk, logged by the store) leaves the row
as it was and the stream as it is. Opening a stream and recording an exit
raise :class:`~.._storage._store_errors.StoreWriteError`, for the caller to answer.

The registry also counts, per room, the streams it holds and what became of
the exits announced there (:class:`StreamCounts`, read by the room's admins on
``GET /rooms/{room}/process-statistics``): counters in memory since the room
started, one dictionary entry per room that ever held a stream or heard an exit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs
import trio

from ..._protocol import (
    AGENT_PROCESS_EXITED,
    AGENT_SESSION_ENDED_ADVICE,
    AGENT_SESSION_ENDED_CODE,
    OWN_EXIT_TEXT,
    OWN_PROCESS_TEXT,
    SESSION_ENDED_410_TEXT,
)
from .._storage._store_errors import StoreWriteError
from .._wire import Credentials, Refusal, Reply, refuse

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._rows import SessionRow
    from .._storage._store import RoomStore

__all__ = [
    "SSE_FORM",
    "WEBSOCKET_FORM",
    "CloseMode",
    "ProcessStream",
    "StreamCounts",
    "StreamForm",
    "StreamRegistry",
    "closed_at_start",
    "dropped",
    "exit_recorded",
    "opened",
    "refresh_outcome",
    "serve_stream",
]

logger = logging.getLogger("letagents_trio.room_server")

CloseMode = Literal["ended", "replaced", "shutdown", "dropped"]

# The fixed frames of the body (§3).
CONNECTED_FRAME: Final = b": connected\n\n"
HEARTBEAT_FRAME: Final = b": heartbeat\n\n"
ENDED_FRAME: Final = b"event: ended\ndata: {}\n\n"


@final
@attrs.frozen
class StreamForm:
    """What a held stream writes, in one transport's framing.

    Attributes:
        opening: the frames that open the stream, given its connection id.
        heartbeat: the frame written every heartbeat interval; ``None`` when the
            transport keeps the connection alive itself (WebSocket pings).
        ended: the frame written before closing when the session ended.
    """

    opening: Callable[[str], tuple[bytes, ...]]
    heartbeat: bytes | None
    ended: bytes


def _sse_opening(connection_id: str) -> tuple[bytes, ...]:
    opening = f'event: open\ndata: {{"connection_id":"{connection_id}"}}\n\n'
    return CONNECTED_FRAME, opening.encode("ascii")


def _websocket_opening(connection_id: str) -> tuple[bytes, ...]:
    # Compact JSON, the shape of the SSE ``open`` event's data, saying that
    # this room acknowledges exit frames (docs/protocol.md §3.1).
    opening = f'{{"event":"open","connection_id":"{connection_id}","exit_ack":true}}'
    return (opening.encode("ascii"),)


# The SSE body of §3.
SSE_FORM: Final = StreamForm(opening=_sse_opening, heartbeat=HEARTBEAT_FRAME, ended=ENDED_FRAME)
# The WebSocket form (docs/protocol.md §3.1): each chunk is one text frame.
WEBSOCKET_FORM: Final = StreamForm(
    opening=_websocket_opening, heartbeat=None, ended=b'{"event":"ended"}'
)


@final
@attrs.frozen(kw_only=True)
class StreamCounts:
    """One room's process connections and announced exits since the room started.

    Attributes:
        held: process streams held now (either transport).
        exits_announced: exits its sessions announced that reached R5's rule
            (authenticated POSTs and exit frames), recorded or not.
        exits_recorded: announced exits that were recorded (the session's
            process marked exited).
        exits_matched: recorded exits that named the connection the room had
            open for the session (the others named none, after a recorded drop).
        exits_over_socket: recorded exits that came as a frame over the
            WebSocket itself rather than as a POST.
    """

    held: int = 0
    exits_announced: int = 0
    exits_recorded: int = 0
    exits_matched: int = 0
    exits_over_socket: int = 0


@final
@attrs.define(eq=False)
class ProcessStream:
    """One held process connection (R4), as the room sees it.

    Attributes:
        session_id: the session the stream belongs to.
        room_id: its room.
        connection_id: the lowercase UUID v4 sent in ``event: open``.
    """

    session_id: str
    room_id: str
    connection_id: str
    _mode: CloseMode | None = None
    _close_requested: trio.Event = attrs.field(factory=trio.Event)

    @property
    def close_mode(self) -> CloseMode | None:
        """How the stream was (or is being) closed; ``None`` while open."""
        return self._mode

    def close(self, mode: CloseMode) -> None:
        """Ask the stream to close; the first mode asked for wins.

        ``"ended"`` writes ``event: ended`` first; ``"replaced"`` and
        ``"shutdown"`` close silently and record nothing; ``"dropped"`` closes as
        if the client vanished and records ``process_disconnected_at``.
        """
        if self._mode is None:
            self._mode = mode
        self._close_requested.set()


@final
@attrs.define(eq=False)
class StreamRegistry:
    """The process streams the room holds (R4), and the exits it records (R5).

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: authenticates the calls.
        heartbeat_interval: seconds between ``: heartbeat`` comments.
        refresh_interval: seconds between ``process_seen_at`` refreshes.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    heartbeat_interval: float
    refresh_interval: float
    _held: dict[str, list[ProcessStream]] = attrs.field(init=False, factory=dict)
    # Per room: StreamCounts' field name -> count.
    _counts: dict[str, Counter[str]] = attrs.field(init=False, factory=dict)

    def open(self, room_id: str, session_id: str, creds: Credentials) -> ProcessStream | Reply:
        """Authenticate and open a process connection (§2.2 steps 1-4), or refuse."""
        try:
            self.accounts.require_room(room_id)
            try:
                self.accounts.authenticate(room_id, creds)
            except Refusal as refusal:
                if (
                    refusal.reply.status == 401
                    and refusal.reply.body.get("error") == AGENT_SESSION_ENDED_ADVICE
                    and creds.session_id == session_id
                ):
                    refuse(410, SESSION_ENDED_410_TEXT, code=AGENT_SESSION_ENDED_CODE)
                raise
            if creds.session_id != session_id:
                refuse(403, OWN_PROCESS_TEXT)
            row = self.store.get_session(session_id)
            if (
                row is None
                or not row.live
                or row.session_kind != "worker"
                or row.room_id != room_id
            ):
                refuse(410, SESSION_ENDED_410_TEXT, code=AGENT_SESSION_ENDED_CODE)
        except Refusal as refusal:
            return refusal.reply
        connection_id = str(uuid.uuid4())
        self.store.put_session(opened(row, connection_id, self.clock.now_ms()))
        stream = ProcessStream(session_id=session_id, room_id=room_id, connection_id=connection_id)
        self._held.setdefault(session_id, []).append(stream)
        self._count(room_id, "held")
        logger.debug("process stream %s opened for %s", connection_id, session_id)
        return stream

    async def serve(
        self,
        stream: ProcessStream,
        write: Callable[[bytes], Awaitable[None]],
        form: StreamForm = SSE_FORM,
    ) -> None:
        """Write the stream in ``form`` until it closes (:func:`serve_stream`), then let it go.

        Cancellation:
            A checkpoint. Cancelled (server shutdown), the stream is forgotten
            and nothing is recorded, unless it had already been marked dropped.
        """
        try:
            await serve_stream(
                stream,
                write,
                form=form,
                heartbeat_interval=self.heartbeat_interval,
                refresh_interval=self.refresh_interval,
                refresh=self._refresh,
            )
        finally:
            self._forget(stream)
            if stream.close_mode == "dropped":
                row = dropped(
                    self.store.get_session(stream.session_id), stream, self.clock.now_ms()
                )
                if row is not None:
                    with contextlib.suppress(StoreWriteError):  # best-effort: see above
                        self.store.put_session(row)
            logger.debug("process stream %s closed (%s)", stream.connection_id, stream.close_mode)

    def _refresh(self, stream: ProcessStream) -> CloseMode | None:
        row = self.store.get_session(stream.session_id)
        outcome = refresh_outcome(row, stream)
        if row is not None and outcome is None:
            with contextlib.suppress(StoreWriteError):  # best-effort: see above
                self.store.put_session(attrs.evolve(row, process_seen_at=self.clock.now_ms()))
        return outcome

    def record_exit(
        self, room_id: str, session_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """R5: record an announced exit under §2.2's rules (:func:`exit_recorded`)."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.authenticate(room_id, creds)
            if creds.session_id != session_id:
                refuse(403, OWN_EXIT_TEXT)
        except Refusal as refusal:
            return refusal.reply
        return Reply(status=200, body=self._record_exit(session_id, body))

    def record_socket_exit(self, stream: ProcessStream, body: Mapping[str, Any]) -> bool:
        """An exit announced over the held socket itself; whether it was recorded.

        The socket was authenticated when it opened, so only the rule of R5
        (:func:`exit_recorded`) applies, to the stream's own session.
        """
        return self._record_exit(stream.session_id, body, over_socket=True)["recorded"]

    def _record_exit(
        self, session_id: str, body: Mapping[str, Any], *, over_socket: bool = False
    ) -> dict[str, bool]:
        """The answer to an exit: ``recorded``, and ``already_recorded`` for a replay."""
        connection_id = body.get("process_connection_id")
        given = connection_id if isinstance(connection_id, str) and connection_id else None
        stored = self.store.get_session(session_id)
        if stored is not None:
            self._count(stored.room_id, "exits_announced")
        if stored is not None and stored.process_connection_id == AGENT_PROCESS_EXITED:
            # A replay (a retry after a lost answer, or anyone holding the
            # session's credentials): the first exit stands, its time with it.
            return {"recorded": False, "already_recorded": True}
        row = exit_recorded(stored, given, self.clock.now_ms())
        if row is not None:
            self.store.put_session(row)
            self._count(row.room_id, "exits_recorded")
            if given is not None:  # recorded with an id: it was the current connection's
                self._count(row.room_id, "exits_matched")
            if over_socket:
                self._count(row.room_id, "exits_over_socket")
        return {"recorded": row is not None}

    def _count(self, room_id: str, name: str, step: int = 1) -> None:
        self._counts.setdefault(room_id, Counter())[name] += step

    def counts(self, room_id: str) -> StreamCounts:
        """A snapshot of one room's counters (all zero for a room never counted)."""
        return StreamCounts(**self._counts.get(room_id, Counter()))

    def _forget(self, stream: ProcessStream) -> None:
        streams = self._held.get(stream.session_id)
        if streams is not None and stream in streams:
            streams.remove(stream)
            self._count(stream.room_id, "held", -1)
            if not streams:
                del self._held[stream.session_id]

    def close_unheld(self) -> int:
        """Close, as drops now, the connections rows say are open but no stream holds.

        For the room's start (:func:`closed_at_start`): a room that starts
        holds nothing, so every such row is left from before it stopped. One
        transaction; a storage that refuses it (logged by the store) leaves
        the rows as they were.

        Returns:
            How many connections were closed.
        """
        now = self.clock.now_ms()
        closed = 0
        with contextlib.suppress(StoreWriteError), self.store.atomic():
            for room_id in self.store.room_ids():
                for row in self.store.room_sessions(room_id):
                    done = None if self.holds(row.session_id) else closed_at_start(row, now)
                    if done is not None:
                        self.store.put_session(done)
                        closed += 1
            return closed
        return 0

    def of(self, session_id: str) -> list[ProcessStream]:
        """The streams held for a session (a copy)."""
        return list(self._held.get(session_id, []))

    def holds(self, session_id: str) -> bool:
        """Whether any stream of the session is held."""
        return bool(self._held.get(session_id))

    def count(self) -> int:
        """How many streams are held."""
        return sum(len(streams) for streams in self._held.values())

    def close(self, session_id: str, mode: CloseMode) -> None:
        """Ask every held stream of a session to close in ``mode``."""
        for stream in self.of(session_id):
            stream.close(mode)

    def close_all(self, mode: CloseMode) -> None:
        """Ask every held stream to close in ``mode``."""
        for session_id in list(self._held):
            self.close(session_id, mode)


def opened(row: SessionRow, connection_id: str, now: int) -> SessionRow:
    """The row once a process connection opened (§2.2 step 4)."""
    return attrs.evolve(
        row, process_seen_at=now, process_connection_id=connection_id, process_disconnected_at=None
    )


def refresh_outcome(row: SessionRow | None, stream: ProcessStream) -> CloseMode | None:
    """The 30 s refresh (§2.2 step 5): ``None`` to keep the stream, else how to close it."""
    if row is None or not row.live:
        return "ended"
    if row.process_connection_id != stream.connection_id:
        return "replaced"
    return None


def dropped(row: SessionRow | None, stream: ProcessStream, now: int) -> SessionRow | None:
    """§2.2 step 6: the row once the client went away, if still current and live."""
    if row is None or not row.live or row.process_connection_id != stream.connection_id:
        return None
    return attrs.evolve(row, process_seen_at=now, process_disconnected_at=now)


def closed_at_start(row: SessionRow, now: int) -> SessionRow | None:
    """A room's start: the row with its open process connection closed as a drop, if it has one.

    The drop of §2.2 step 6, for a live worker session whose row says a
    connection is open (an id other than ``"exited"``, no disconnect) that
    the starting room does not hold.
    """
    if (
        not row.live
        or row.session_kind != "worker"
        or row.process_connection_id in (None, AGENT_PROCESS_EXITED)
        or row.process_disconnected_at is not None
    ):
        return None
    return attrs.evolve(row, process_seen_at=now, process_disconnected_at=now)


def exit_recorded(row: SessionRow | None, connection_id: str | None, now: int) -> SessionRow | None:
    """R5: the row once an announced exit is recorded, or ``None`` if it is not.

    Recorded for a live worker session that has had a process connection, when
    the exit names its current connection, or names none after a recorded drop.
    The exit is stamped no earlier than the agent was last heard.
    """
    if (
        row is None
        or not row.live
        or row.session_kind != "worker"
        or row.process_seen_at is None
        or not (
            row.process_connection_id == connection_id
            if connection_id is not None
            else row.process_disconnected_at is not None
        )
    ):
        return None
    at = max(now, row.agent_heard_at or 0)
    return attrs.evolve(
        row,
        process_seen_at=at,
        process_disconnected_at=at,
        process_connection_id=AGENT_PROCESS_EXITED,
    )


async def serve_stream(
    stream: ProcessStream,
    write: Callable[[bytes], Awaitable[None]],
    *,
    form: StreamForm = SSE_FORM,
    heartbeat_interval: float,
    refresh_interval: float,
    refresh: Callable[[ProcessStream], CloseMode | None],
) -> None:
    """Write ``stream`` in ``form`` until it is asked to close (§3, §3.1).

    Args:
        stream: the held stream.
        write: sends one chunk of the body (one frame, on a WebSocket).
        form: the transport's framing (the SSE body by default).
        heartbeat_interval: seconds between heartbeats (when the form has one).
        refresh_interval: seconds between calls of ``refresh``.
        refresh: refreshes the session's evidence; returns how to close, if so.

    Cancellation:
        A checkpoint; cancelled, it stops writing at once (``event: ended``
        is written only when the stream closes as ``"ended"``).
    """
    for frame in form.opening(stream.connection_id):
        await write(frame)
    start = trio.current_time()
    beats = refreshes = 1
    while not stream._close_requested.is_set():
        # A form without a heartbeat (the transport pings) wakes only to refresh.
        next_beat = start + beats * heartbeat_interval if form.heartbeat is not None else math.inf
        next_refresh = start + refreshes * refresh_interval
        with trio.move_on_at(min(next_beat, next_refresh)):
            await stream._close_requested.wait()
        if stream._close_requested.is_set():
            break
        now = trio.current_time()
        if now >= next_refresh:
            refreshes += 1
            outcome = refresh(stream)
            if outcome is not None:
                stream.close(outcome)
                break
        if now >= next_beat:
            beats += 1
            assert form.heartbeat is not None
            await write(form.heartbeat)
    if stream.close_mode == "ended":
        await write(form.ended)
