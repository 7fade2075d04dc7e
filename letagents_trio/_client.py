"""The room API client: one ``httpx2.AsyncClient``, the letagents rules around it.

What :class:`RoomClient` adds to plain HTTP (PROTOCOL §2, §5.7, §10):

* **Paths.** A room id is percent-encoded per ``/``-separated segment (so
  ``owner/repo`` stays two segments); a session id is percent-encoded whole.
* **Credentials.** The owner token goes out as ``Authorization: Bearer``; a
  session's id and token as ``X-LetAgents-Agent-Session-Id`` / ``-Token``.
  Neither ever reaches a repr, a log line or an exception message: bodies the
  room echoes back are redacted before they are shown.
* **Two kinds of request.** Ordinary calls share one ``httpx2.AsyncClient``.
  The process connection's requests, which come by the thousand (its stream
  or WebSocket upgrade, :meth:`RoomClient.start_request`, and the exit,
  :meth:`RoomClient.announce_exit`), go through the stack
  :func:`letagents_trio._http.choose_stack` picks once: the lean HTTP/1.1
  path over the ``opener``, or over the network when nothing says otherwise,
  or httpx2 itself when the client was given an httpx2 transport or the
  environment configures a proxy. Headers for every request are built by
  one function, ``_headers``.
* **Ended sessions.** A 401 whose body says ``This agent session has ended.``
  marks the stored session ended (guarded by its token) before the error is
  raised, so the next registration starts afresh instead of reusing it.
* **Owner logout.** A 401 on an owner call (no worker credential anywhere in
  the request) clears the stored owner auth if the refused token is the stored
  one; a 401 on a worker call never does.
* **Bounded answers.** Every call has a deadline (``call_timeout``, 30 s by
  default; a long poll opts out with ``bounded=False`` and keeps its own),
  asks for ``Accept-Encoding: identity`` and refuses an answer in any other
  coding, and reads at most ``max_answer_bytes`` of body (a larger declared ``Content-Length`` is
  refused unread). A room that never answers, or answers forever, costs a
  bounded time and memory.
* **Busy retries.** :meth:`RoomClient.call_when_free` retries a 503 after 1 s
  and then 2 s, or later when ``Retry-After`` asks for more (capped at 30 s).

The state file is reached only through the small :class:`StateHooks` protocol,
which :class:`letagents_trio.workers.LocalStateStore` satisfies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any, final

import trio

from . import _protocol
from ._errors import ApiError, RoomUnreachable
from ._exit_posts import MAX_EXIT_ANSWER_BYTES, ExitPosts
from ._exits import HandedExit
from ._http import (
    HTTPFailure,
    Opener,
    Response,
    bound_informational,
    choose_stack,
    failure_name,
)
from ._redact import redact
from ._refusals import StateHooks, after_refusal, path_of, read_answer
from ._request_parts import (
    dumps,
    encode_room_path,
    encode_session_path,
    exit_body,
    request_headers,
    secrets_of,
)
from ._util import is_http_url

if TYPE_CHECKING:
    import httpx2

    from ._session import AgentSession

__all__ = [
    "OwnerTokenSource",
    "RoomClient",
    "encode_room_path",
    "encode_session_path",
]

OwnerTokenSource = str | Callable[[], str | None] | None
"""An owner token, or a callable asked for the current one before every request."""

logger = logging.getLogger("letagents_trio.api")

# Idle connections kept for ordinary calls; streams and exits have their own.
KEEPALIVE_CONNECTIONS = 32
# Why every request fails when httpx2 cannot use the environment's proxy.
_UNUSABLE_PROXY = (
    "the proxy configured in the environment (HTTP_PROXY, HTTPS_PROXY or ALL_PROXY) "
    "cannot be used: it must be a valid URL, a SOCKS proxy needs the socksio package "
    "(pip install socksio), and only http, https, socks5 and socks5h proxies are known; "
    "no request goes around it"
)
# A Retry-After above a day is not a busy room; keeps the parsed value finite.
_RETRY_AFTER_CEILING = 86_400.0


def _retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for, or None when absent or garbage."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value), _RETRY_AFTER_CEILING)
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - time.time()), _RETRY_AFTER_CEILING)


@final
class RoomClient:
    """A client for one letagents room API.

    Use it as an async context manager (it closes its HTTP client on exit), or
    call :meth:`aclose` yourself.

    Args:
        api_url: the room API's base URL; trailing slashes are removed.
        owner_token: the owner's bearer token, if the process acts for an owner;
            or a callable asked for it before every request (None or ``""``:
            none now), so a sign-out or a sign-in made elsewhere (the state
            file's ``auth``) takes effect at the next request, as in the Node
            client. It is called often: it must be cheap and never block.
        transport: an ``httpx2.AsyncBaseTransport`` to use instead of the
            network for ordinary calls (for example
            :class:`letagents_trio.testing.StreamingASGITransport`); without an
            ``opener``, it serves the process connection's requests too.
        opener: where the process connection's requests (streams, upgrades,
            exits) get their connections, over the lean HTTP/1.1 path (the
            testing kit's transport is one). Default: the network, unless a
            ``transport`` is given or the environment configures a proxy,
            whose requests then go through httpx2 (see "The process
            connection's requests" in ``docs/architecture.md``).
        state: where ended sessions and owner logouts are recorded; None records nothing.
        call_timeout: seconds one call may take, request to last body byte,
            unless the call says ``bounded=False``.
        max_answer_bytes: the largest answer body a call reads.

    Raises:
        ValueError: ``api_url`` is not an ``http://`` or ``https://`` URL with a
            host (``localhost:3001`` lacks its scheme), or a limit is not positive.
    """

    def __init__(
        self,
        api_url: str = _protocol.DEFAULT_API_URL,
        *,
        owner_token: OwnerTokenSource = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        opener: Opener | None = None,
        state: StateHooks | None = None,
        call_timeout: float = _protocol.CALL_TIMEOUT,
        max_answer_bytes: int = _protocol.MAX_ANSWER_BYTES,
    ) -> None:
        if not call_timeout > 0:
            raise ValueError(f"call_timeout must be positive, got {call_timeout}")
        if max_answer_bytes < 1:
            raise ValueError(f"max_answer_bytes must be at least 1, got {max_answer_bytes}")
        if not is_http_url(api_url):  # refused here, not at the first call
            raise ValueError(
                f"api_url {api_url!r} is not an http(s) URL: give the room API's address with"
                f" its scheme and host, for example {_protocol.DEFAULT_API_URL}"
            )
        self.api_url = api_url.rstrip("/")
        self.call_timeout = call_timeout
        self.max_answer_bytes = max_answer_bytes
        if callable(owner_token):
            self._owner_source: Callable[[], str | None] = owner_token
        else:
            fixed = owner_token or None
            self._owner_source = lambda: fixed
        self._state = state
        self._transport = transport
        # Made on the first ordinary call: a process that only holds streams
        # never imports httpx2 nor builds its TLS context.
        self._http_client: httpx2.AsyncClient | None = None
        # How the process connection's requests are sent (see the module docstring).
        self._stack = choose_stack(
            opener=opener, transport=transport, http_client=lambda: self._http
        )
        self._closed = False
        self._exit_posts = ExitPosts(
            self._stack,
            api_url=self.api_url,
            owner_token=lambda: self._owner_token,
            state=state,
            parse=parsed_answer,
        )

    @property
    def _http(self) -> httpx2.AsyncClient:
        """The shared httpx2 client, made on first use.

        Raises:
            RoomUnreachable: the environment configures a proxy httpx2 cannot
                use (a URL it cannot parse, a SOCKS proxy without the socksio
                package, an unknown scheme). Every request fails so, never
                bypassing the proxy.
        """
        if self._http_client is None:
            if self._closed:
                raise RuntimeError("the RoomClient is closed")
            self._http_client = _new_http_client(self._transport)
            if self._transport is None:
                bound_informational(self._http_client)
        return self._http_client

    def __repr__(self) -> str:
        owner = "set" if self._owner_token else "none"
        return f"<RoomClient api_url={self.api_url!r} owner_token={owner}>"

    @property
    def _owner_token(self) -> str | None:
        """The owner token now: asked of the source each time, never cached."""
        return self._owner_source() or None

    @property
    def has_owner_token(self) -> bool:
        """Whether requests made now carry an owner bearer token."""
        return self._owner_token is not None

    @property
    def owner_token_key(self) -> str | None:
        """A digest naming the current owner token (SHA-256 hex), or None without one.

        Lets a cache of what the token stands for (the account) notice that
        the token changed, without holding the token itself.
        """
        token = self._owner_token
        return None if token is None else hashlib.sha256(token.encode("utf-8")).hexdigest()

    async def __aenter__(self) -> RoomClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client, every connection it pooled, and the exits' kept-alive ones.

        Cancellation:
            Connections are closed even when cancelled (a socket close, or
            forcefully).
        """
        self._closed = True
        try:
            await self._stack.aclose()
        finally:
            if self._http_client is not None:
                await self._http_client.aclose()

    # --- paths and headers ---------------------------------------------------

    def session_url(self, session: AgentSession, suffix: str = "") -> str:
        """The URL of ``session``'s agent-session resource, plus ``suffix``."""
        return (
            f"{self.api_url}/rooms/{encode_room_path(session.room_id)}"
            f"/agent-sessions/{encode_session_path(session.session_id)}{suffix}"
        )

    # --- the process connection ------------------------------------------------

    async def start_request(
        self,
        method: str,
        url: str,
        *,
        session: AgentSession | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Response:
        """Send one request of the process connection; return the response, unread.

        The seam for connectors: a process stream, or a WebSocket upgrade
        whose raw stream the response then hands over
        (:meth:`~letagents_trio._http.Response.detach`). It goes over a
        connection of its own, through the client's stack (see the module
        docstring), with the credentials every call sends and ``headers``
        added. No read timeout: the caller owns the answer time and silence.
        The caller closes the response.

        Raises:
            RoomUnreachable: the connection or the exchange failed.

        Cancellation:
            A checkpoint; cancelled, the connection is closed.
        """
        fields = request_headers(session, json_body=body is not None, owner_token=self._owner_token)
        if headers:
            fields.update(headers)
        try:
            return await self._stack.start(method, url, list(fields.items()), body)
        except HTTPFailure as exc:
            raise RoomUnreachable(f"{method} {path_of(url)} failed: {exc}") from exc

    async def announce_exit(
        self,
        session: AgentSession,
        connection_id: str | None,
        *,
        sent: Callable[[], object] | None = None,
    ) -> bool:
        """Tell the room this process no longer holds ``session`` (``POST …/process/exit``).

        Over the lean path each exit is written as soon as it is asked,
        pipelined behind the exits already on one of a few kept-alive
        connections to the room (:mod:`letagents_trio._http._pool`): exits
        asked at once are in flight at once, a room slow to answer holds back
        only the answers, and a replayed exit changes nothing (PROTOCOL §2.2).
        Over httpx2 (a proxy, or a transport given), each is one request
        through the client's httpx2 connection pool.

        Args:
            session: the session whose process is gone.
            connection_id: the process connection that was open, if any.
            sent: called once, with no checkpoint, when the exit is on its
                way (over the lean path: handed to the kernel; over httpx2:
                as it starts), or else when this call ends. The SSE stream
                closes itself there, so that thousands of holders unwind only
                once their exits are written.

        Returns:
            Whether the room recorded the exit.

        Raises:
            ApiError: the room answered with a non-2xx status.
            RoomUnreachable: the request failed at the network level.

        Cancellation:
            A checkpoint; cancelled mid-way, the room may or may not have
            recorded the exit. Callers bound it with a deadline.
        """
        url = self.session_url(session, "/process/exit")
        body = exit_body(session, connection_id)
        fields = request_headers(session, json_body=True, owner_token=self._owner_token)
        try:
            reply = await self._stack.exchange(
                "POST",
                url,
                list(fields.items()),
                dumps(body),
                max_body=MAX_EXIT_ANSWER_BYTES,
                sent=sent,
            )
        except HTTPFailure as exc:
            raise RoomUnreachable(f"POST {path_of(url)} failed: {exc}") from exc
        text = reply.body.decode("utf-8", "replace")
        retry_after = reply.header("Retry-After")
        answer = await self._answer("POST", url, reply.status, text, retry_after, session, body)
        return isinstance(answer, Mapping) and answer.get("recorded") is True

    def hand_exit(
        self, session: AgentSession, connection_id: str, *, sent: Callable[[], object]
    ) -> HandedExit:
        """:meth:`announce_exit`, ready to be handed over with no task of its own.

        Sent (:meth:`HandedExit.send <letagents_trio._exits.HandedExit.send>`),
        it is pipelined as :meth:`announce_exit`'s would be, and settled by
        :meth:`deliver_exits` when its answer is read: recorded or not, or
        failed as :meth:`announce_exit` would raise. Over httpx2 (a proxy, or
        a transport given) it cannot be handed over: its send says so.
        ``sent`` as for :meth:`announce_exit`.
        """
        return HandedExit(
            self, lambda handed: self._exit_posts.send(handed, session, connection_id, sent)
        )

    async def deliver_exits(self) -> None:
        """Send the exits handed over and read their answers, until each is settled.

        A 401 among the answers is applied to local state here, as for
        :meth:`announce_exit`.

        Cancellation:
            A checkpoint; cancelled, the exits not settled are given up: the
            room may or may not have them.
        """
        await self._stack.deliver()
        await self._exit_posts.apply_refusals()

    # --- generic calls -----------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        session: AgentSession | None = None,
        bounded: bool = True,
    ) -> Any:
        """Call the room API and return the parsed JSON answer (None for an empty body).

        Args:
            method: the HTTP method.
            path: a path under the API URL (``/rooms/…``), or a full URL.
            json: the JSON request body, if any.
            session: send this session's credentials in the session headers.
            bounded: whether the client's ``call_timeout`` (30 s by default)
                bounds the whole call, request to last body byte. False for a
                call the caller bounds itself with a cancel scope, such as a
                long poll that keeps its own deadline.

        Raises:
            ApiError: a non-2xx answer, after recording an ended session or an
                owner logout as PROTOCOL §5.7 says.
            RoomUnreachable: the request failed at the network level, no
                answer came within the deadline, or the answer was not JSON,
                was larger than ``max_answer_bytes`` or in a content coding.

        Cancellation:
            A checkpoint. Cancelled while the request is in flight (or past
            its deadline), the connection is closed; the room may have acted
            on the request.
        """
        import httpx2

        url = path if path.startswith(("http://", "https://")) else f"{self.api_url}{path}"
        content = None if json is None else dumps(json)
        headers = request_headers(session, json_body=True, owner_token=self._owner_token)
        headers["Accept-Encoding"] = _protocol.IDENTITY_ENCODING
        request = self._http.build_request(method, url, content=content, headers=headers)
        limit = self.call_timeout if bounded else math.inf
        raw: bytes | None = None
        with trio.move_on_after(limit):
            try:
                response = await self._http.send(request, stream=True)
                try:
                    raw = await read_answer(response, method, url, self.max_answer_bytes)
                finally:
                    await response.aclose()
            except httpx2.RequestError as exc:
                # TransportError, and DecodingError for a body that cannot be decoded.
                raise RoomUnreachable(
                    f"{method} {path_of(url)} failed: {failure_name(exc)}"
                ) from exc
        if raw is None:
            raise RoomUnreachable(f"{method} {path_of(url)}: no answer within {limit:g} s")
        return await self._answer(
            method,
            url,
            response.status_code,
            raw.decode(response.encoding or "utf-8", errors="replace"),
            response.headers.get("Retry-After"),
            session,
            json,
        )

    async def _answer(
        self,
        method: str,
        url: str,
        status: int,
        text: str,
        retry_after: str | None,
        session: AgentSession | None,
        json: object,
    ) -> Any:
        """The parsed answer of a call, or its refusal as :class:`ApiError` (both paths).

        A 401 is applied to local state first (PROTOCOL §5.7).
        """
        if status == 401 and self._state is not None:
            await after_refusal(
                self._state,
                text,
                session,
                json,
                owner_token=self._owner_token,
                secrets=secrets_of(self._owner_token, session, json),
            )
        secrets = secrets_of(self._owner_token, session, json)
        return parsed_answer(method, url, status, text, retry_after, secrets)

    async def call_when_free(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        session: AgentSession | None = None,
    ) -> Any:
        """Like :meth:`call`, but retry while the room is busy for a moment (503).

        For requests the room turns away only while another registration is
        committing, and that changed nothing when turned away. A 503 is retried
        after 1 s and then 2 s (3 attempts in all), or after what ``Retry-After``
        asks for when that is longer, capped at 30 s. Any other answer is final.

        Cancellation:
            A checkpoint; every wait between attempts can be cancelled, and a
            cancelled attempt is not retried.
        """
        for delay in (*_protocol.BUSY_RETRY_DELAYS, None):
            try:
                return await self.call(method, path, json=json, session=session)
            except ApiError as exc:
                if exc.status != 503 or delay is None:
                    raise
                wait = delay if exc.retry_after is None else max(delay, exc.retry_after)
                wait = min(wait, _protocol.BUSY_RETRY_MAX_DELAY)
                logger.info("room busy on %s %s; retrying in %.1f s", method, path, wait)
                await trio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover


def _loads(text: str) -> Any:
    return json.loads(text)


def parsed_answer(
    method: str, url: str, status: int, text: str, retry_after: str | None, secrets: list[str]
) -> Any:
    """The parsed answer of a call, or its refusal as :class:`ApiError` (no state applied).

    ``secrets``: what the refusal's text must not show.
    """
    if not 200 <= status < 300:
        raise ApiError(status, redact(text, secrets), retry_after=_retry_after(retry_after))
    if not text.strip():
        return None
    try:
        return _loads(text)
    except (ValueError, RecursionError) as exc:
        # RecursionError: nesting too deep for the parser is not an answer either.
        raise RoomUnreachable(f"{method} {path_of(url)} answered with invalid JSON") from exc


def _new_http_client(transport: httpx2.AsyncBaseTransport | None) -> httpx2.AsyncClient:
    """A room client's httpx2 client, over ``transport`` or the network.

    Raises:
        RoomUnreachable: the environment configures a proxy httpx2 cannot use.
    """
    import httpx2

    try:
        return httpx2.AsyncClient(
            transport=transport,
            timeout=httpx2.Timeout(
                connect=_protocol.CONNECT_TIMEOUT,
                read=None,
                write=_protocol.CONNECT_TIMEOUT,
                pool=_protocol.CONNECT_TIMEOUT,
            ),
            # No cap on connections: a burst of calls never waits for the pool.
            limits=httpx2.Limits(
                max_connections=None, max_keepalive_connections=KEEPALIVE_CONNECTIONS
            ),
            follow_redirects=False,
        )
    except (ImportError, ValueError, httpx2.InvalidURL) as exc:
        # The message is ours: a proxy URL can hold credentials.
        raise RoomUnreachable(_UNUSABLE_PROXY) from exc
