"""Presence rules: has an agent session's process exited, is it gone (PROTOCOL.md §7.2).

The room hands a held name to a new registration of the same owner only when
the holder is *gone*, and it may wait a few seconds for a holder that is *gone
soon*. These are pure functions of the evidence the room keeps per session
(:class:`SessionEvidence`), the time ``now`` and the host id the registrant
reports (the *observer*). Every time here is in **milliseconds**, as upstream
states them, and ``now`` is always passed in: the functions read no clock.

Definitions, per session ``s``:

* ``heard`` = ``agent_heard_at``, else ``last_seen_at``, else 0. The room moves
  ``last_seen_at`` for its own bookkeeping too, so once ``agent_heard_at`` is
  set a bookkeeping touch does not count as the agent being there.
* ``seen`` = ``last_seen_at``, else 0.
* same host = the observer's host id is non-empty and equals
  ``process_host_id``.

:func:`exited`: the process connection closed (``process_seen_at`` and
``process_disconnected_at`` set), no delivery connection is open, the agent was
not heard after the close, and the close was not merely the room letting go of
an already ended session (``disconnected > ended_at``). Then the process has
exited if it said so (``process_connection_id == "exited"``) or, seen from the
same host, the connection has stayed closed for 15 s: three times the longest
reconnect wait, so a living process would have reopened it.

:func:`gone`: never while a delivery connection is open; always once exited.
Otherwise it is a matter of silence, ``now - max(process_seen_at, seen,
heard)``: 10 min for a session that once had a process connection or that has
ended, 60 min for one that never had (an older client), and *never* for a
durable worker that reported no host id, because nothing it does could show
that it is still there.

:func:`gone_soon_at`: for a holder that is not gone yet but will be within
15 s (a closed connection seen from the same host, or an announced exit while a
delivery connection lingers), the moment it will be. :func:`name_comes_free_at`
folds that over every holder of a name, so a registration can wait once (to
that moment + :data:`NAME_WAIT_MARGIN_MS`) and then take the name back instead
of being given a codename.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, final

import attrs

from ... import _protocol
from ...workers._names import is_durable_worker_id, name_key

if TYPE_CHECKING:
    from .._storage._rows import SessionRow


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


__all__ = [
    "AGENT_DELIVERY_LINGERS_MS",
    "AGENT_PROCESS_EXITED",
    "AGENT_PROCESS_GONE_AFTER_MS",
    "AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS",
    "AGENT_WITHOUT_EVIDENCE_GONE_AFTER_MS",
    "NAME_WAIT_MARGIN_MS",
    "Holder",
    "Registrant",
    "SessionEvidence",
    "evidence_of",
    "exited",
    "gone",
    "gone_soon_at",
    "is_releasable",
    "name_comes_free_at",
    "name_wait_ms",
]

# The rules work in integer epoch milliseconds, like the room's rows; the
# values (and why each is what it is) live once, in seconds, in _protocol.
AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS: Final = _ms(_protocol.PROCESS_GONE_ON_SAME_HOST_AFTER)
AGENT_PROCESS_GONE_AFTER_MS: Final = _ms(_protocol.PROCESS_GONE_AFTER)
AGENT_WITHOUT_EVIDENCE_GONE_AFTER_MS: Final = _ms(_protocol.WITHOUT_EVIDENCE_GONE_AFTER)
AGENT_DELIVERY_LINGERS_MS: Final = _ms(_protocol.DELIVERY_LINGERS)
NAME_WAIT_MARGIN_MS: Final = _ms(_protocol.NAME_WAIT_MARGIN)
AGENT_PROCESS_EXITED: Final = _protocol.AGENT_PROCESS_EXITED


@final
@attrs.frozen(kw_only=True)
class SessionEvidence:
    """What the room knows about one session's presence (PROTOCOL.md §7.1).

    Times are milliseconds on the room's clock, ``None`` when never set.

    Attributes:
        process_seen_at: last time a process connection was open (refreshed
            every 30 s while it stays open).
        process_connection_id: id of the last process connection, or
            ``"exited"`` after the process announced its exit.
        process_disconnected_at: when the last process connection closed.
        process_host_id: the host id the session's process reported.
        agent_heard_at: last authenticated room call with the session's
            credentials (and the registration itself).
        last_seen_at: like ``agent_heard_at``, but also moved by the room's
            own bookkeeping.
        ended_at: when the session ended.
        delivery_connected: a delivery connection (long poll or stream) is open
            now, or closed less than the linger ago.
        agent_instance_id: the session's instance id (``worker_<hex>`` for a
            durable worker).
    """

    process_seen_at: float | None = None
    process_connection_id: str | None = None
    process_disconnected_at: float | None = None
    process_host_id: str | None = None
    agent_heard_at: float | None = None
    last_seen_at: float | None = None
    ended_at: float | None = None
    delivery_connected: bool = False
    agent_instance_id: str | None = None


def evidence_of(row: SessionRow, *, delivery_connected: bool) -> SessionEvidence:
    """The presence evidence of a stored session row (§7.1)."""
    return SessionEvidence(
        process_seen_at=row.process_seen_at,
        process_connection_id=row.process_connection_id,
        process_disconnected_at=row.process_disconnected_at,
        process_host_id=row.process_host_id,
        agent_heard_at=row.agent_heard_at,
        last_seen_at=row.last_seen_at,
        ended_at=row.ended_at,
        delivery_connected=delivery_connected,
        agent_instance_id=row.agent_instance_id,
    )


def _heard(s: SessionEvidence) -> float:
    if s.agent_heard_at is not None:
        return s.agent_heard_at
    if s.last_seen_at is not None:
        return s.last_seen_at
    return 0


def _same_host(s: SessionEvidence, observer_host_id: str | None) -> bool:
    return bool(observer_host_id) and observer_host_id == s.process_host_id


def _announced_exit(s: SessionEvidence) -> bool:
    return s.process_connection_id == AGENT_PROCESS_EXITED


def exited(s: SessionEvidence, *, now: float, observer_host_id: str | None) -> bool:
    """True when the session's process has exited, as far as the observer can tell.

    Args:
        s: the session's evidence.
        now: the room's time in ms.
        observer_host_id: the host id the registrant reports (may be empty).

    Returns:
        False if a delivery connection is open, no process connection was ever
        seen or closed, the agent was heard after the close, or the close came
        after the session had ended. Otherwise True if the process announced
        its exit, or the observer is on the session's host and the connection
        has been closed for at least 15 000 ms; else False.
    """
    disconnected = s.process_disconnected_at
    if s.delivery_connected or s.process_seen_at is None or disconnected is None:
        return False
    if _heard(s) > disconnected:
        return False
    if s.ended_at is not None and disconnected > s.ended_at:
        return False
    if _announced_exit(s):
        return True
    return (
        _same_host(s, observer_host_id)
        and now - disconnected >= AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS
    )


def gone(s: SessionEvidence, *, now: float, observer_host_id: str | None) -> bool:
    """True when the session's agent is no longer there and its name may pass on.

    Args:
        s: the session's evidence.
        now: the room's time in ms.
        observer_host_id: the host id the registrant reports (may be empty).

    Returns:
        False while a delivery connection is open; True once :func:`exited`.
        Otherwise, with ``silent`` the time since the latest of
        ``process_seen_at``, ``last_seen_at`` and ``heard``: ``silent >=
        600 000`` for a session that had a process connection or has ended;
        ``silent >= 3 600 000`` for one that never had, if it can recover (it
        reported a host id, or is not a durable worker); never otherwise.
    """
    if s.delivery_connected:
        return False
    if exited(s, now=now, observer_host_id=observer_host_id):
        return True
    seen = s.last_seen_at if s.last_seen_at is not None else 0
    process_seen = s.process_seen_at if s.process_seen_at is not None else 0
    silent = now - max(process_seen, seen, _heard(s))
    if s.process_seen_at is not None or s.ended_at is not None:
        return silent >= AGENT_PROCESS_GONE_AFTER_MS
    can_recover = bool(s.process_host_id) or not is_durable_worker_id(s.agent_instance_id)
    return can_recover and silent >= AGENT_WITHOUT_EVIDENCE_GONE_AFTER_MS


def gone_soon_at(s: SessionEvidence, *, now: float, observer_host_id: str | None) -> float | None:
    """Return when a closed process will count as exited, if that is at most 15 s away.

    Args:
        s: the session's evidence.
        now: the room's time in ms.
        observer_host_id: the host id the registrant reports (may be empty).

    Returns:
        ``None`` unless a process connection was seen and closed, the agent was
        not heard after the close, and the process announced its exit or the
        observer is on its host. Then the moment is the close (announced exit)
        or the close + 15 000 ms (same host), but no earlier than the close +
        12 000 ms while a delivery connection is open. That moment is returned
        when it is at most 15 000 ms after ``now`` (it may lie in the past),
        else ``None``.
    """
    disconnected = s.process_disconnected_at
    if s.process_seen_at is None or disconnected is None or _heard(s) > disconnected:
        return None
    announced = _announced_exit(s)
    if not announced and not _same_host(s, observer_host_id):
        return None
    closed_at = (
        disconnected if announced else disconnected + AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS
    )
    lapse = disconnected + AGENT_DELIVERY_LINGERS_MS if s.delivery_connected else 0
    at = max(closed_at, lapse)
    if at - now <= AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS:
        return at
    return None


@final
@attrs.frozen(kw_only=True)
class Holder:
    """A session that holds a name in a room, with what decides whether it may lose it.

    Attributes:
        evidence: the session's presence evidence.
        name: its display name.
        owner_id: its owner's account id (``None``: unknown, matches no one).
        supervised: it was minted under a supervisor grant (never released).
        agent_key: its agent key.
    """

    evidence: SessionEvidence
    name: str
    owner_id: str | None
    supervised: bool = False
    agent_key: str

    @property
    def instance_id(self) -> str | None:
        """The session's instance id (kept once, in its evidence)."""
        return self.evidence.agent_instance_id


@final
@attrs.frozen(kw_only=True)
class Registrant:
    """The agent asking for a name: the observer of the presence rules.

    Attributes:
        owner_id: its owner's account id (``None``: unknown, owns nothing).
        agent_key: its agent key.
        instance_id: its instance id.
        process_host_id: the host id it reports; empty or ``None`` when it
            reports none (then no holder is ever "on the same host").
    """

    owner_id: str | None
    agent_key: str
    instance_id: str | None
    process_host_id: str | None = None


def _is_own(holder: Holder, registrant: Registrant) -> bool:
    return holder.agent_key == registrant.agent_key and holder.instance_id == registrant.instance_id


def _same_owner(holder: Holder, registrant: Registrant) -> bool:
    return holder.owner_id is not None and holder.owner_id == registrant.owner_id


def is_releasable(holder: Holder, *, registrant: Registrant, now: float) -> bool:
    """True when ``registrant`` may take ``holder``'s name (PROTOCOL.md §7.3).

    The name match (the holder's key equals the base name's key, or the name
    the durable registrant first asked for) is the caller's to check; this
    checks the rest: same owner, not supervised, not the registrant's own
    (agent_key, instance) pair, and :func:`gone` as seen by the registrant.

    Args:
        holder: a session holding the name.
        registrant: the agent asking for it.
        now: the room's time in ms.
    """
    return (
        _same_owner(holder, registrant)
        and not holder.supervised
        and not _is_own(holder, registrant)
        and gone(holder.evidence, now=now, observer_host_id=registrant.process_host_id)
    )


def name_comes_free_at(
    name: str, holders: Iterable[Holder], *, registrant: Registrant, now: float
) -> float | None:
    """Return when ``name`` will pass to ``registrant``, if worth waiting for.

    Looks at every holder whose :func:`~letagents_trio.workers._names.name_key` equals
    that of ``name``, skipping the registrant's own (agent_key, instance) pair.

    Args:
        name: the display name asked for.
        holders: the room's name holders.
        registrant: the agent asking.
        now: the room's time in ms.

    Returns:
        ``None`` if any such holder has another owner or is supervised, if any
        such holder that is not already gone has no :func:`gone_soon_at`, or if
        no holder remains once the gone ones are skipped (nothing to wait for).
        Otherwise the latest ``gone_soon_at`` of the remaining holders.
    """
    key = name_key(name)
    matching = [h for h in holders if name_key(h.name) == key and not _is_own(h, registrant)]
    if any(not _same_owner(h, registrant) or h.supervised for h in matching):
        return None
    observer = registrant.process_host_id
    latest: float | None = None
    for holder in matching:
        if gone(holder.evidence, now=now, observer_host_id=observer):
            continue
        at = gone_soon_at(holder.evidence, now=now, observer_host_id=observer)
        if at is None:
            return None
        latest = at if latest is None else max(latest, at)
    return latest


def name_wait_ms(at: float, *, now: float) -> float:
    """Return how long a registration sleeps (once) before re-reading the room.

    Args:
        at: what :func:`name_comes_free_at` returned.
        now: the room's time in ms.

    Returns:
        ``max(0, at - now) + 500`` ms.
    """
    return max(0, at - now) + NAME_WAIT_MARGIN_MS
