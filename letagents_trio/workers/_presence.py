"""A worker's presence in its room: the status the roster shows, and who the worker is.

The letagents room keeps one *presence* per worker (``POST …/presence``): a
status, one of :data:`PRESENCE_STATUSES`, and the short text the worker last
gave (``status_text``), which the room's roster (``GET …/presence``) shows.
The Node client sets it as its tools go, and so do ours:

* ``post_status`` sets the text the worker posted and a status read from it
  (:func:`classify_status`: words of waiting for work read ``idle``, of being
  stuck ``blocked``, of availability ``idle``, of review ``reviewing``, else
  ``working``; blank keeps the status remembered), *before* it posts
  ``[status] …``;
* ``send_message`` and ``add_task`` send the presence remembered for that
  worker again after their write (``idle`` with no text until a status was
  posted), so the roster sees the worker act.

What was last sent is remembered per room and actor label
(:class:`PresenceMemory`, one per server process, as the Node client's). A
room without the route (404 or 405) is no failure: the call is skipped, as the
Node client skips it. Only worker sessions have a presence: an owner's own call
sends none.

:func:`agent_identity` is the public identity the Node tools answer beside a
write (``agent_identity``): the worker's names, owner, IDE, actor label, keys
and this process's instance id, never a credential.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final, Literal, final, get_args

import attrs

from ._identity import PROCESS_INSTANCE_ID
from ._names import js_trim, normalize_agent_base_name, owner_attribution

if TYPE_CHECKING:
    from .._session import AgentSession

__all__ = [
    "PRESENCE_STATUSES",
    "Presence",
    "PresenceMemory",
    "PresenceStatus",
    "agent_identity",
    "classify_status",
    "presence_body",
]

PresenceStatus = Literal["idle", "working", "reviewing", "blocked"]
# The statuses the letagents room accepts for a presence (its AGENT_PRESENCE_STATUSES).
PRESENCE_STATUSES: Final[tuple[str, ...]] = get_args(PresenceStatus)

# The words the Node client reads a status text by, in the order it tries them.
_WAITING_FOR_WORK: Final = re.compile(
    r"\b(?:awaiting|waiting)\s+(?:for\s+)?"
    r"(?:tasks?|work|instructions?|direction|assignments?|next(?:\s+task)?|queue)\b",
    re.IGNORECASE,
)
_STUCK: Final = re.compile(r"\b(?:blocked|waiting|stuck)\b", re.IGNORECASE)
_AVAILABLE: Final = re.compile(
    r"\b(?:idle|available|online|polling|monitoring|watch(?:ing)?|ready|standby)\b",
    re.IGNORECASE,
)
_REVIEWING: Final = re.compile(
    r"\b(?:review|reviewing|approve|approval|approving)\b", re.IGNORECASE
)


def classify_status(text: str, fallback: PresenceStatus = "working") -> PresenceStatus:
    """The presence status a status text reads as (``fallback`` when it is blank)."""
    text = js_trim(text)
    if not text:
        return fallback
    if _WAITING_FOR_WORK.search(text):
        return "idle"
    if _STUCK.search(text):
        return "blocked"
    if _AVAILABLE.search(text):
        return "idle"
    if _REVIEWING.search(text):
        return "reviewing"
    return "working"


@final
@attrs.frozen(kw_only=True)
class Presence:
    """A presence as sent: a status and the text the worker gave (or none)."""

    status: PresenceStatus = "idle"
    status_text: str | None = None


@final
@attrs.define(eq=False)
class PresenceMemory:
    """The presence last sent per room and actor label (``idle``, no text, before any)."""

    _sent: dict[tuple[str, str], Presence] = attrs.field(factory=dict, init=False)

    def remembered(self, room_id: str, session: AgentSession) -> Presence:
        """What was last sent for ``session``'s worker in ``room_id``."""
        return self._sent.get((room_id, _label(session)), Presence())

    def remember(self, room_id: str, session: AgentSession, presence: Presence) -> None:
        """Remember ``presence`` as the one sent for ``session``'s worker."""
        self._sent[(room_id, _label(session))] = presence


def _label(session: AgentSession) -> str:
    label = session.extra.get("actor_label")
    return label if isinstance(label, str) else session.display_name


def _text(session: AgentSession, key: str) -> str | None:
    value = session.extra.get(key)
    return value if isinstance(value, str) else None


def presence_body(session: AgentSession, presence: Presence) -> dict[str, Any]:
    """The body of ``POST …/presence`` for ``session``'s worker, the Node client's fields
    (the credentials travel as the session's headers, or as the worker's bearer)."""
    liveness_keys = ("host_id", "host_kind", "host_label", "liveness_capability", "tool_bridge_id")
    return {
        "actor_label": _label(session),
        "agent_key": _text(session, "agent_key"),
        "display_name": session.display_name,
        "owner_label": _text(session, "owner_label"),
        "ide_label": _text(session, "ide_label"),
        "status": presence.status,
        "status_text": presence.status_text,
        "liveness_observation": {key: _text(session, key) for key in liveness_keys},
    }


def agent_identity(session: AgentSession) -> dict[str, Any]:
    """The public identity of ``session``'s worker, as the Node tools answer it."""
    owner = _text(session, "owner_label") or ""
    return {
        "name": normalize_agent_base_name(session.display_name),
        "display_name": session.display_name,
        "owner_label": owner,
        "owner_attribution": owner_attribution(owner or "Owner"),
        "ide_label": _text(session, "ide_label") or "Agent",
        "actor_label": _label(session),
        "canonical_key": _text(session, "agent_key"),
        "runtime_key": f"agent_session:{session.session_id}",
        "agent_instance_id": PROCESS_INSTANCE_ID,
        "source": "api",
    }
