"""Sessions a room answers 404 for, told to a person in one line per outcome.

A room restarted without its store (``letagents-trio room --memory``) answers
every held session's process stream 404 at once: one warning per session,
named by its id, buried the news under dozens of long lines. Each holder now
reports its first 404 of a run here (:meth:`UnknownSessions.note`); the
details go to the debug log, and :data:`SUMMARY_WINDOW` seconds after the
first report one warning per outcome names how many sessions and which
workers (their display names), and what to do:

* *forgotten*: the room served the session before, so it forgot it; the worker
  registers again by its key or ``worker_id`` and the room makes it a new session;
* *no route*: the first answer was already 404: a wrong API URL, a room
  without the process route, or one that never knew the session.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, final

import trio

if TYPE_CHECKING:
    from ._policy import HoldPolicy
    from ._session import AgentSession

__all__ = ["UnknownSessions"]

logger = logging.getLogger("letagents_trio.holder")

# Seconds on trio's clock between a first 404 and the summary: a restarted room
# answers every held session within about one reconnect delay (1 s).
SUMMARY_WINDOW: Final = 1.0
# Workers named in a summary; more are counted ("and 12 more").
NAMED: Final = 10
FORGOTTEN_TEXT: Final = (
    "the room no longer knows %d %s it served before: %s. A room restarted without its"
    " store forgets its sessions: register each worker again with its registration_key"
    " or worker_id, and the room makes it a new session. Retrying after %s s"
)
NO_ROUTE_TEXT: Final = (
    "no process route for %d %s at this address: %s (a wrong API URL, a room without"
    " the route, or one that does not know the sessions). Retrying after %s s"
)


@final
class UnknownSessions:
    """Collects the holders' first 404s and logs one summary per outcome.

    Args:
        nursery: where the summary waits for its window (the manager's).
        policy: the retry schedule the summary names.
    """

    def __init__(self, nursery: trio.Nursery, policy: HoldPolicy) -> None:
        self._nursery = nursery
        self._schedule = ", ".join(f"{d:g}" for d in policy.unsupported_delays)
        self._pending: dict[bool, list[str]] = {True: [], False: []}

    def note(self, session: AgentSession, detail: str, *, served_before: bool) -> None:
        """A holder's first 404 of a run: logged at debug now, summed up soon after."""
        logger.debug(
            "process connection of %s (%s): %s%s",
            session.session_id,
            session.display_name,
            detail,
            " from a room that served it before" if served_before else "",
        )
        names = self._pending[served_before]
        if not names:
            try:
                self._nursery.start_soon(self._summarize, served_before)
            except RuntimeError:  # the manager's nursery is closing: no summary then
                return
        names.append(session.display_name or session.session_id)

    async def _summarize(self, served_before: bool) -> None:
        await trio.sleep(SUMMARY_WINDOW)
        names, self._pending[served_before] = self._pending[served_before], []
        more = len(names) - NAMED
        shown = ", ".join(names[:NAMED]) + (f" and {more} more" if more > 0 else "")
        sessions = "session" if len(names) == 1 else "sessions"
        text = FORGOTTEN_TEXT if served_before else NO_ROUTE_TEXT
        logger.warning(text, len(names), sessions, shown, self._schedule)
