"""What the room client's requests are made of: paths, credential fields, JSON bodies.

One place for each part every request of :class:`~letagents_trio.RoomClient`
shares (its ordinary calls, its process connection's stream and its exits),
and for what a refusal's text must not show.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import TYPE_CHECKING
from urllib.parse import quote

from . import _protocol
from ._refusals import WORKER_CREDENTIAL_KEYS

if TYPE_CHECKING:
    from ._session import AgentSession

__all__ = [
    "dumps",
    "encode_room_path",
    "encode_session_path",
    "exit_body",
    "exit_json",
    "request_headers",
    "secrets_of",
]

# Body keys whose values are secrets, redacted from anything shown.
_SECRET_KEYS = (*WORKER_CREDENTIAL_KEYS, "token", "worker_bearer", "session_token")


# A process holds the sessions of a few rooms: each room's path is encoded once.
@functools.lru_cache(maxsize=256)
def encode_room_path(room_id: str) -> str:
    """Percent-encode a room id for a path, keeping ``/`` between segments."""
    return "/".join(quote(segment, safe="") for segment in room_id.split("/"))


def encode_session_path(session_id: str) -> str:
    """Percent-encode a session id whole, for a path."""
    return quote(session_id, safe="")


def request_headers(
    session: AgentSession | None, *, json_body: bool, owner_token: str | None
) -> dict[str, str]:
    """A request's credential fields, with ``owner_token`` as the caller just asked it."""
    headers: dict[str, str] = {}
    if json_body:
        headers["Content-Type"] = "application/json"
    if owner_token:
        headers["Authorization"] = f"Bearer {owner_token}"
    if session is not None:
        headers[_protocol.SESSION_ID_HEADER] = session.session_id
        headers[_protocol.SESSION_TOKEN_HEADER] = session.session_token
    return headers


def secrets_of(owner_token: str | None, session: AgentSession | None, body: object) -> list[str]:
    """What a refusal's text must not show: the credentials of the call."""
    secrets = [owner_token or ""]
    if session is not None:
        secrets.append(session.session_token)
    if isinstance(body, Mapping):
        secrets.extend(str(body[k]) for k in _SECRET_KEYS if isinstance(body.get(k), str))
    return secrets


def exit_body(session: AgentSession, connection_id: str | None) -> dict[str, object]:
    """The body of R5, the exit announcement."""
    return {
        "agent_session_id": session.session_id,
        "agent_session_token": session.session_token,
        "process_connection_id": connection_id,
    }


def exit_json(session: AgentSession, connection_id: str | None) -> bytes:
    """``dumps(exit_body(session, connection_id))``, the same bytes, written at once.

    A goodbye writes thousands: each string quoted by the encoder
    :func:`json.dumps` uses, not through its general walk of a dict.
    """
    named = "null" if connection_id is None else encode_basestring(connection_id)
    return (
        f'{{"agent_session_id":{encode_basestring(session.session_id)},'
        f'"agent_session_token":{encode_basestring(session.session_token)},'
        f'"process_connection_id":{named}}}'
    ).encode()


def dumps(value: object) -> bytes:
    """JSON as every request body is written: compact, UTF-8, no NaN."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
