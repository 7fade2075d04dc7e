"""What a room's agents work with: its messages, guidelines, board, memory and requests.

:class:`RoomWork` holds the parts that serve the room's work routes, each over
the room's one store, clock and accounts: :class:`~._messaging._messages.MessageBoard`
(messages, threads, long polls), :class:`~._guidelines.GuidelinesBoard`,
:class:`~._board._taskboard.TaskBoard` (tasks and their leases) and
:class:`~._knowledge.KnowledgeBoard` (memory and requests for people),
:class:`~._wake._wakes.WakeBoard` (wake rules), what agents report:
:class:`~._reports._reasoning.ReasoningBoard` and
:class:`~._reports._agent_work.AgentWorkBoard` (workspace captures), and
the board's governance: :class:`~._board._intents.BoardGovernance` (Board
Manager settings and intents), :class:`~._board._decisions.IntentDecisions`,
:class:`~._board._reviews.ReviewBoard` (review leases and verdicts) and
:class:`~._board._record.RecordBoard` (artifacts and events). The
route table calls them directly; :class:`~._room.Room` builds them, and keeps
for itself what concerns sessions (registration, process streams, presence,
liveness).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, final

import attrs

from ._board._decisions import IntentDecisions
from ._board._hooks import BoardHooks
from ._board._intents import BoardGovernance
from ._board._record import RecordBoard
from ._board._reviews import ReviewBoard
from ._board._taskboard import TaskBoard
from ._guidelines import GuidelinesBoard
from ._knowledge import KnowledgeBoard
from ._messaging._messages import MessageBoard
from ._reports._agent_work import AgentWorkBoard
from ._reports._reasoning import ReasoningBoard
from ._sessions._roster import Roster
from ._wake._wakes import WakeBoard

if TYPE_CHECKING:
    from ._auth._accounts import Accounts
    from ._clock import RoomClock
    from ._storage._store import RoomStore

__all__ = ["RoomWork"]


@final
@attrs.frozen(kw_only=True)
class RoomWork:
    """The parts that serve a room's work routes.

    Attributes:
        messages: messages, threads and long polls (R7, R8).
        guidelines: each room's agent guidelines.
        tasks: the board: tasks and their leases.
        knowledge: room memory and requests for people's input.
        roster: what each worker says it is doing (``…/presence``).
        wakes: agents' wake rules, and the loop that fires them.
        reasoning: agents' visible reasoning.
        agent_work: published workspace captures.
        governance: Board Manager settings, assignments and intents.
        decisions: approving and denying intents.
        reviews: review leases and verdicts.
        record: shared artifacts and the room's events.
    """

    messages: MessageBoard
    guidelines: GuidelinesBoard
    tasks: TaskBoard
    knowledge: KnowledgeBoard
    roster: Roster
    wakes: WakeBoard
    reasoning: ReasoningBoard
    agent_work: AgentWorkBoard
    governance: BoardGovernance
    decisions: IntentDecisions
    reviews: ReviewBoard
    record: RecordBoard

    @classmethod
    def build(
        cls,
        store: RoomStore,
        clock: RoomClock,
        accounts: Accounts,
        *,
        poll_max_ms: int,
        reachable: Callable[[str], bool],
        wake_min_lead_ms: int,
    ) -> RoomWork:
        """The parts, over one store, clock and accounts.

        Args:
            poll_max_ms: the long-poll cap.
            reachable: whether a session can be reached in its room now.
            wake_min_lead_ms: the least time ahead a wake timer may be.
        """
        messages = MessageBoard(store, clock, accounts, poll_max_ms=poll_max_ms)
        record = RecordBoard(store, clock, accounts)
        governance = BoardGovernance(store, clock, accounts, messages, record)
        tasks = TaskBoard(store, clock, accounts, reachable, BoardHooks(governance, record))
        wakes = WakeBoard(store, clock, accounts, messages, min_lead_ms=wake_min_lead_ms)
        tasks.status_changed.append(wakes.task_changed)
        agent_work = AgentWorkBoard(store, clock, accounts)
        messages.attachments.append(agent_work.attachments)
        decisions = IntentDecisions(store, clock, accounts, record, governance)
        decisions.status_changed = tasks.status_changed
        return cls(
            messages=messages,
            guidelines=GuidelinesBoard(store, clock, accounts, messages),
            tasks=tasks,
            knowledge=KnowledgeBoard(store, clock, accounts, messages),
            roster=Roster(store, clock, accounts),
            wakes=wakes,
            reasoning=ReasoningBoard(store, clock, accounts),
            agent_work=agent_work,
            governance=governance,
            decisions=decisions,
            reviews=ReviewBoard(store, clock, accounts, record, reachable),
            record=record,
        )
