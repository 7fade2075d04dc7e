"""The exits a room client hands over: each ``POST …/process/exit`` made cheaply, settled as read.

:meth:`RoomClient.hand_exit <letagents_trio.RoomClient.hand_exit>` makes an
exit ready (:class:`~letagents_trio._exits.HandedExit`); sent, it is given to
the client's stack with no task of its own (``Stack.send_nowait``), and its
answer, read by :meth:`RoomClient.deliver_exits
<letagents_trio.RoomClient.deliver_exits>`, settles it: recorded or not, or
refused or unreachable as :meth:`~letagents_trio.RoomClient.announce_exit`
would raise. A goodbye makes thousands within its deadline, so the room's
URL is split once, and the body written at once (:func:`exit_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final
from urllib.parse import unquote

import trio

from ._errors import ApiError, RoomUnreachable
from ._http import Answer, HTTPFailure, Origin, split_url
from ._refusals import after_refusal
from ._request_parts import (
    encode_room_path,
    encode_session_path,
    exit_body,
    exit_json,
    request_headers,
    secrets_of,
)

if TYPE_CHECKING:
    from ._exits import HandedExit
    from ._http import Stack
    from ._refusals import StateHooks
    from ._session import AgentSession

__all__ = ["MAX_EXIT_ANSWER_BYTES", "ExitPosts"]

# The largest exit answer read: the room's is ``{"recorded":true}``.
MAX_EXIT_ANSWER_BYTES = 64 * 1024

# The room's answer to an exit it recorded, as the letagents API writes it.
_RECORDED = b'{"recorded":true}'
# What the client reads of an answer: a status, its body's text and its
# Retry-After, for a call of its method and URL, and what its refusal must not show.
Parse = Callable[[str, str, int, str, "str | None", list[str]], Any]


@final
class ExitPosts:
    """A room client's exits handed over, from their request to their outcome.

    Args:
        stack: the client's stack.
        api_url: the room API's base URL.
        owner_token: asked for the owner token as each exit is made.
        state: where a 401's rules apply (PROTOCOL §5.7), if anywhere.
        parse: the client's reading of an answer (its refusal raised).
    """

    def __init__(
        self,
        stack: Stack,
        *,
        api_url: str,
        owner_token: Callable[[], str | None],
        state: StateHooks | None,
        parse: Parse,
    ) -> None:
        self._stack = stack
        self._api_url = api_url
        self._owner_token = owner_token
        self._state = state
        self._parse = parse
        # The API's origin and path, split once: an exit's target is that
        # path and its own; None when the base has a query or a fragment.
        origin, target = split_url(api_url)
        self._base: tuple[Origin, str] | None = (
            None if "?" in api_url or "#" in api_url else (origin, target.rstrip("/"))
        )
        # The 401s answered to exits, for apply_refusals (they wait for the state file).
        self._refused: list[tuple[AgentSession, str, dict[str, object]]] = []

    def send(
        self,
        handed: HandedExit,
        session: AgentSession,
        connection_id: str,
        sent: Callable[[], object],
    ) -> bool:
        """Give ``handed``'s POST to the stack, with no checkpoint; whether it took it."""
        path = (
            f"/rooms/{encode_room_path(session.room_id)}"
            f"/agent-sessions/{encode_session_path(session.session_id)}/process/exit"
        )
        if self._base is None:
            origin, target = split_url(self._api_url + path)
        else:
            origin, target = self._base[0], self._base[1] + path
        owner_token = self._owner_token()
        fields = request_headers(session, json_body=True, owner_token=owner_token)

        def settled(reply: Answer | None, failure: HTTPFailure | None) -> None:
            if reply is None:
                where = unquote(target.partition("?")[0])
                handed.settle(False, RoomUnreachable(f"POST {where} failed: {failure}"))
            else:
                self._settle(handed, reply, session, path, connection_id)

        return self._stack.send_nowait(
            "POST",
            origin,
            target,
            list(fields.items()),
            exit_json(session, connection_id),
            max_body=MAX_EXIT_ANSWER_BYTES,
            settled=settled,
            sent=sent,
        )

    def _settle(
        self,
        handed: HandedExit,
        reply: Answer,
        session: AgentSession,
        path: str,
        connection_id: str,
    ) -> None:
        """Settle ``handed`` with what ``reply`` says, as ``RoomClient.announce_exit`` reads it."""
        if reply.status == 200 and reply.body == _RECORDED:
            handed.settle(True, None)  # the room's answer, as it writes it: no parse needed
            return
        text = reply.body.decode("utf-8", "replace")
        body = exit_body(session, connection_id)
        if reply.status == 401 and self._state is not None:
            self._refused.append((session, text, body))
        try:
            url = self._api_url + path
            retry_after = reply.header("Retry-After")
            secrets = secrets_of(self._owner_token(), session, body)
            answer = self._parse("POST", url, reply.status, text, retry_after, secrets)
        except (ApiError, RoomUnreachable) as exc:
            handed.settle(False, exc)
            return
        handed.settle(isinstance(answer, Mapping) and answer.get("recorded") is True, None)

    async def apply_refusals(self) -> None:
        """Apply the rules of each 401 answered to an exit to local state (PROTOCOL §5.7).

        Cancellation:
            A checkpoint (each rule's write); cancelled, the rest are not applied.
        """
        refused, self._refused = self._refused, []
        state = self._state
        if state is None or not refused:
            await trio.lowlevel.checkpoint()
            return
        for session, text, body in refused:
            owner_token = self._owner_token()
            await after_refusal(
                state,
                text,
                session,
                body,
                owner_token=owner_token,
                secrets=secrets_of(owner_token, session, body),
            )
