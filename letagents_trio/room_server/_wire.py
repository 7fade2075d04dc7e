"""The room's side of the wire: what a request carries, what a rule answers, row JSON.

Every rule of the room takes :class:`Credentials` (what a request said about
who it is) and answers a :class:`Reply` (status, JSON body, headers); the HTTP
app (``_app.py``) only parses and renders them. A rule that refuses raises
:class:`Refusal` through :func:`refuse` deep inside a check and the room's
public method turns it into its :class:`Reply`: refusal is control flow that
never leaves the room.

The JSON renderings of stored rows live here too (:func:`projection` for
sessions), with every time written as JavaScript's ``toISOString`` writes it
(:func:`~letagents_trio._protocol.format_iso`). Tokens are stored only as their
SHA-256 (:func:`hash_token`) and compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NoReturn, final

import attrs

from .._protocol import BUSY_TEXT, format_iso

if TYPE_CHECKING:
    from ._storage._rows import SessionRow
    from ._storage._store_errors import StoreWriteError

__all__ = [
    "MAX_ACTOR_KEY_CHARS",
    "MAX_DISPLAY_NAME_CHARS",
    "MAX_INSTANCE_ID_CHARS",
    "MAX_ROUTING_ID_CHARS",
    "OWNER_AUTH_TEXT",
    "ROOM_NOT_FOUND_TEXT",
    "Credentials",
    "Refusal",
    "Reply",
    "busy",
    "hash_token",
    "iso",
    "opt_str",
    "projection",
    "random_code",
    "refuse",
    "storage_refusal",
    "token_matches",
    "valid_room_id",
]

# The exact texts and codes of PROTOCOL.md §2.1 live in _protocol.py (one copy
# for the room and its clients). Texts of our own (upstream's were not read,
# PROTOCOL.md §9.7):
ROOM_NOT_FOUND_TEXT: Final = "Room not found"
# The letters and digits of the codes the room makes (``random_code``).
_CODE_ALPHABET: Final = "BCDFGHJKMNPQRSTVWXZ23456789"
OWNER_AUTH_TEXT: Final = "Authentication required."
# Room and session ids beyond this are refused before any lookup.
MAX_ROUTING_ID_CHARS: Final = 256
# Identity fields longer than these cannot be routed in mentions; upstream's
# exact bounds were not read, so these are ours (documented in docs/room-server.md).
MAX_ACTOR_KEY_CHARS: Final = 256
MAX_INSTANCE_ID_CHARS: Final = 128
MAX_DISPLAY_NAME_CHARS: Final = 128
# A write the room's storage refused (issue 30): 507 when it is full, else 503.
STORAGE_FULL_TEXT: Final = (
    "The room's storage is full: nothing was written. Try again once it has space."
)
STORAGE_FULL_CODE: Final = "storage_full"
STORAGE_FAILED_TEXT: Final = (
    "The room could not write to its storage: nothing was written. Try again later."
)
STORAGE_FAILED_CODE: Final = "storage_unavailable"


@final
@attrs.frozen(kw_only=True)
class Reply:
    """A route's answer: status, JSON body, extra headers."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = attrs.field(factory=dict)

    def body_bytes(self) -> bytes:
        """The body as compact JSON in UTF-8, as Express writes it (``→`` stays ``→``);
        escaped to ASCII only should a string hold a lone surrogate, which UTF-8
        cannot carry."""
        try:
            return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(self.body, separators=(",", ":")).encode("ascii")


@final
@attrs.frozen(kw_only=True)
class Credentials:
    """What a request carried to say who it is. Tokens are never shown.

    Attributes:
        owner_token: the bearer token, if any.
        session_id: the session id from the header or body, if any.
        session_token: the session token from the header or body, if any.
    """

    owner_token: str | None = attrs.field(default=None, repr=False)
    session_id: str | None = None
    session_token: str | None = attrs.field(default=None, repr=False)


@final
class Refusal(Exception):  # internal control flow: never escapes Room
    """A rule's refusal, carrying the reply to send."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


def refuse(status: int, error: str, **extra: Any) -> NoReturn:
    """Refuse with ``{"error": error, **extra}``."""
    raise Refusal(Reply(status=status, body={"error": error, **extra}))


def busy() -> Reply:
    """The 503 a registration gets when the room's registration lock cannot be had."""
    return Reply(status=503, body={"error": BUSY_TEXT}, headers={"Retry-After": "1"})


def storage_refusal(error: StoreWriteError) -> Reply:
    """The answer to a request whose write the storage refused: 507 when full, else 503."""
    if error.full:
        return Reply(status=507, body={"error": STORAGE_FULL_TEXT, "code": STORAGE_FULL_CODE})
    return Reply(status=503, body={"error": STORAGE_FAILED_TEXT, "code": STORAGE_FAILED_CODE})


def random_code() -> str:
    """A fresh ``XXXX-XXXX`` code a person reads and types (a user code, an invite code).

    Consonants and digits only: no words, no look-alikes (0/O, 1/I/L); 27**8 codes.
    """
    chars = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
    return f"{chars[:4]}-{chars[4:]}"


def hash_token(token: str) -> str:
    """Return the SHA-256 hex of a token: the only form in which tokens are stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(row: SessionRow, token: str) -> bool:
    """Whether ``token`` is the session's token (constant-time)."""
    return hmac.compare_digest(row.token_hash, hash_token(token))


def opt_str(body: Mapping[str, Any], key: str) -> str | None:
    """``body[key]`` when it is a non-empty string, else ``None``."""
    value = body.get(key)
    return value if isinstance(value, str) and value != "" else None


def valid_room_id(room_id: str) -> bool:
    """A room id is printable, unpadded and at most :data:`MAX_ROUTING_ID_CHARS` long."""
    return (
        0 < len(room_id) <= MAX_ROUTING_ID_CHARS
        and room_id.isprintable()
        and room_id.strip() == room_id
    )


def iso(ms: int | None) -> str | None:
    """Epoch ms as ``toISOString`` writes them; ``None`` stays ``None``."""
    return None if ms is None else format_iso(ms / 1000)


def projection(row: SessionRow) -> dict[str, Any]:
    """The session JSON the room returns (no token, no bearer)."""
    return {
        "session_id": row.session_id,
        "room_id": row.room_id,
        "session_kind": row.session_kind,
        "runtime": row.runtime,
        "host_id": row.host_id,
        "host_kind": row.host_kind,
        "host_label": row.host_label,
        "liveness_capability": row.liveness_capability,
        "tool_bridge_id": row.tool_bridge_id,
        "actor_label": row.actor_label,
        "agent_key": row.agent_key,
        "agent_instance_id": row.agent_instance_id,
        "display_name": row.display_name,
        "assigned_base_display_name": row.assigned_base_display_name,
        "owner_account_id": row.owner_account_id,
        "supervisor_grant_id": row.supervisor_grant_id,
        "owner_label": row.owner_label,
        "ide_label": row.ide_label,
        "repo_branch": row.repo_branch,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "last_seen_at": iso(row.last_seen_at),
        "ended_at": iso(row.ended_at),
        "end_reason": row.end_reason,
    }
