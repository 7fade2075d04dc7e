"""Liveness notices (PROTOCOL.md §7.5): telling a room that a worker holding work went quiet.

Only live, unsupervised worker sessions are ever announced. Each is decided by
a pure function of its row, the time and whether it is reachable now (a held
process stream, or a delivery connection):

* :func:`offline_notice`: an unreachable session holding active ``work``
  leases, unheard for at least the grace and at most 60 min, is announced
  offline once per outage epoch (the drop it started with, else the row's
  last update);
* :func:`recovery_notice`: a reachable session announced offline and not
  yet back is announced connected again.

Each decision carries the notice's text, its dedupe id and the row with the
announcement recorded. :class:`LivenessSweep` applies them over every room:
the room runs one sweep a minute.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, NoReturn, final

import attrs
import trio

from .._protocol import OFFLINE_ANNOUNCE_MAX_AGE
from ._messaging._messages import LIVENESS_SOURCE
from ._storage._store_errors import StoreWriteError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._board._taskboard import TaskBoard
    from ._clock import RoomClock
    from ._messaging._messages import MessageBoard
    from ._storage._rows import MessageRow, SessionRow
    from ._storage._store import RoomStore

__all__ = [
    "OFFLINE_ANNOUNCE_MAX_AGE_MS",
    "LivenessSweep",
    "Notice",
    "announceable",
    "format_offline_duration",
    "offline_notice",
    "offline_text",
    "recovery_notice",
]

logger = logging.getLogger("letagents_trio.room_server")

# The _protocol.py value the room compares with its millisecond clock.
OFFLINE_ANNOUNCE_MAX_AGE_MS: Final = round(OFFLINE_ANNOUNCE_MAX_AGE * 1000)


@final
@attrs.define(eq=False)
class LivenessSweep:
    """Posts the liveness notices that are due, over every room.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        board: where notices are posted.
        tasks: which work leases a session holds.
        reachable: whether a session is reachable at a time (stream or delivery).
        grace_ms: how long unheard before the offline notice.
    """

    store: RoomStore
    clock: RoomClock
    board: MessageBoard
    tasks: TaskBoard
    reachable: Callable[[str, int], bool]
    grace_ms: int

    def sweep(self) -> list[MessageRow]:
        """Post the notices due now; return those posted (a dedupe id posts once)."""
        now = self.clock.now_ms()
        posted: list[MessageRow] = []
        for room_id in self.store.room_ids():
            for row in self.store.room_sessions(room_id):
                if not announceable(row):
                    continue
                if self.reachable(row.session_id, now):
                    notice = recovery_notice(row, now)
                else:
                    tasks = self.tasks.work_task_ids(row.session_id)
                    notice = offline_notice(row, tasks, now, grace_ms=self.grace_ms)
                if notice is None:
                    continue
                message = self.board.post_notice(
                    room_id,
                    notice.text,
                    dedupe_id=notice.dedupe_id,
                    source=LIVENESS_SOURCE,
                    prompt_kind="auto",
                )
                self.store.put_session(notice.row)
                if message is not None:
                    posted.append(message)
        return posted

    async def run(self, interval: float) -> NoReturn:
        """Sweep every ``interval`` seconds, forever.

        A sweep the store could not write is logged by the store, and the
        next one tries again.

        Cancellation:
            Runs until cancelled; a sweep is synchronous, so cancellation
            never leaves one half done.
        """
        next_at = trio.current_time()
        while True:
            next_at += interval
            await trio.sleep_until(next_at)
            try:
                posted = self.sweep()
            except StoreWriteError:
                continue
            if posted:
                logger.info("liveness sweep posted %d notice(s)", len(posted))


@final
@attrs.frozen(kw_only=True)
class Notice:
    """A liveness notice to post once (per dedupe id), and the row that records it."""

    text: str
    dedupe_id: str
    row: SessionRow


def announceable(row: SessionRow) -> bool:
    """Only live, unsupervised worker sessions are ever announced offline."""
    return row.session_kind == "worker" and not row.supervisor_grant_id and row.live


def recovery_notice(row: SessionRow, now: int) -> Notice | None:
    """For a reachable session: the recovery notice due, if it was announced offline since."""
    announced = row.offline_announced_at
    if announced is None or (
        row.recovery_announced_at is not None and row.recovery_announced_at >= announced
    ):
        return None
    return Notice(
        text=f"[status] {row.actor_label} is connected to the room again.",
        dedupe_id=f"agent_liveness:recovered:{row.session_id}:{announced}",
        row=attrs.evolve(row, recovery_announced_at=now),
    )


def offline_notice(
    row: SessionRow, task_ids: list[str], now: int, *, grace_ms: int
) -> Notice | None:
    """For an unreachable session holding work: the offline notice due, if any.

    Due when it has been unheard for at least ``grace_ms`` and at most 60 min,
    once per outage epoch (the drop it started with, else the row's last update).
    """
    if not task_ids:
        return None
    last_seen = max(row.last_seen_at or 0, row.agent_heard_at or 0, row.process_seen_at or 0)
    offline_for = now - last_seen
    if not grace_ms <= offline_for <= OFFLINE_ANNOUNCE_MAX_AGE_MS:
        return None
    epoch = (
        row.process_disconnected_at if row.process_disconnected_at is not None else row.updated_at
    )
    if row.offline_epoch_announced == epoch:
        return None
    return Notice(
        text=offline_text(row.actor_label, offline_for, task_ids),
        dedupe_id=f"agent_liveness:offline:{row.session_id}:{epoch}",
        row=attrs.evolve(row, offline_epoch_announced=epoch, offline_announced_at=now),
    )


def format_offline_duration(offline_ms: int) -> str:
    """``<m>m`` (at least 1), ``<h>h`` or ``<h>h <m>m`` (§7.5)."""
    minutes = max(1, offline_ms // 60_000)
    hours, rest = divmod(minutes, 60)
    if hours == 0:
        return f"{minutes}m"
    return f"{hours}h" if rest == 0 else f"{hours}h {rest}m"


def offline_text(label: str, offline_ms: int, task_ids: list[str]) -> str:
    """The offline notice of §7.5, word for word."""
    shown = ", ".join(task_ids[:3])
    if len(task_ids) > 3:
        shown += f" and {len(task_ids) - 3} more"
    return (
        f"[status] {label} has been offline for {format_offline_duration(offline_ms)}"
        f" while holding {shown}. It may still be working; reassign only after it or its"
        " supervisor confirms it has stopped, or a human directs the transfer."
    )
