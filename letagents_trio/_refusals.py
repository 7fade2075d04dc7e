"""What the room client does with an answer's body, and after a refusal (PROTOCOL §5.7).

* :func:`read_answer` reads an ordinary call's body as sent: refused when it is
  in a content coding the call did not ask for (nothing is inflated), or when
  it is, or says it will be, larger than the client's cap.
* :func:`after_refusal` applies the two rules of a 401 to local state: an owner
  call refused clears the stored owner auth when the refused token is the
  stored one (a worker call never does), and a
  body saying the session ended marks the stored session ended, guarded by its
  token. The two are independent, and neither failure hides the room's answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit

from . import _protocol
from ._errors import RoomUnreachable
from ._redact import redact

if TYPE_CHECKING:
    import httpx2

    from ._session import AgentSession

__all__ = [
    "WORKER_CREDENTIAL_KEYS",
    "StateHooks",
    "after_refusal",
    "path_of",
    "read_answer",
    "session_credentials",
]

logger = logging.getLogger("letagents_trio.api")

# Body keys that carry a worker credential: a 401 on such a request is about
# the worker, never about the owner, so it must not log the owner out.
WORKER_CREDENTIAL_KEYS = ("agent_session_token", "replace_agent_session_token", "connection_token")


class StateHooks(Protocol):
    """What the client needs from the local state file (PROTOCOL §5.7, §6.5)."""

    async def end_session(
        self, session_id: str, ended_at: str | None, expected_token: str
    ) -> object:
        """Mark a stored session ended, unless a newer token replaced it.

        ``ended_at`` None means now, by the state's own wall clock.

        Cancellation:
            Awaited inside :meth:`letagents_trio.RoomClient.call` before the error is raised;
            a cancelled call cancels it too.
        """

    async def clear_auth(self, refused_token: str) -> object:
        """Forget the stored owner auth, only if its token is ``refused_token``.

        A token the room refused that is not the stored one (an owner token
        from the environment) says nothing about the stored sign-in, which is
        every other process's on the machine.

        Cancellation:
            As for :meth:`end_session`.
        """


def path_of(url: str) -> str:
    """The path of ``url``, decoded, for messages (never the query or the host)."""
    return unquote(urlsplit(url).path)


def _too_large(method: str, url: str, cap: int) -> RoomUnreachable:
    return RoomUnreachable(
        f"{method} {path_of(url)} answered with a body larger than {cap} bytes; refused"
    )


async def read_answer(response: httpx2.Response, method: str, url: str, cap: int) -> bytes:
    """The answer's body as sent, refused when encoded or larger than ``cap``.

    Raises:
        RoomUnreachable: the body is encoded, or larger than ``cap`` bytes.

    Cancellation:
        A checkpoint per chunk read; cancelled, the body is left unread.
    """
    coding = response.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", _protocol.IDENTITY_ENCODING):
        raise RoomUnreachable(
            f"{method} {path_of(url)} answered in a content coding it was not asked for"
        )
    declared = response.headers.get("Content-Length", "").strip()
    if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > cap):
        raise _too_large(method, url, cap)
    import httpx2  # imported on the first call (see RoomClient._http)

    try:
        ready = response.content  # a transport that hands over a body already read
    except httpx2.ResponseNotRead:
        pass
    else:
        if len(ready) > cap:
            raise _too_large(method, url, cap)
        return ready
    body = bytearray()
    async with aclosing(response.aiter_raw()) as chunks:
        async for chunk in chunks:
            body += chunk
            if len(body) > cap:
                raise _too_large(method, url, cap)
    return bytes(body)


def session_credentials(session: AgentSession | None, body: object) -> tuple[str, str] | None:
    """The session a request spoke for: its headers' session, else its body's."""
    if session is not None:
        return session.session_id, session.session_token
    if isinstance(body, Mapping):
        sid, token = body.get("agent_session_id"), body.get("agent_session_token")
        if isinstance(sid, str) and sid and isinstance(token, str) and token:
            return sid, token
    return None


async def after_refusal(
    state: StateHooks,
    text: str,
    session: AgentSession | None,
    body: object,
    *,
    owner_token: str | None,
    secrets: Sequence[str],
) -> None:
    """Apply a 401's two rules to local state (PROTOCOL §5.7).

    The hooks' errors are logged by type and redacted text only: a state
    store's message could quote the token it compared.

    Cancellation:
        Awaited before the call's error is raised; a cancelled call cancels it.
    """
    worker_call = session is not None or (
        isinstance(body, Mapping) and any(k in body for k in WORKER_CREDENTIAL_KEYS)
    )

    def failed(what: str, exc: Exception) -> None:
        logger.warning(
            "could not %s in local state: %s: %s",
            what,
            type(exc).__name__,
            redact(str(exc), list(secrets)),
        )

    if not worker_call and owner_token:
        logger.warning("the room refused the owner token; forgetting it if it is the stored one")
        try:
            await state.clear_auth(owner_token)
        except Exception as exc:
            failed("clear the stored owner auth", exc)
    if _protocol.AGENT_SESSION_ENDED_ERROR in text:
        ids = session_credentials(session, body)
        if ids is not None:
            try:
                await state.end_session(ids[0], None, ids[1])
            except Exception as exc:
                failed("mark the session ended", exc)
