"""Floods of informational answers on the httpx2 path (issue 30 row 7, its httpx2 half).

httpcore2 skips ``1xx`` heads until a final answer with no count of its own
(``_receive_response_headers`` loops on ``h11.InformationalResponse``), so a
room or proxy that answers with them forever held a request until its deadline,
and a call without one (``bounded=False``) for ever, parsing some 2,400 heads
per read between checkpoints. Every httpx2 request of a client (each ordinary
call; with a proxy configured, the process stream and the exit too) now fails
past ``MAX_INFORMATIONAL``, as the lean path does. The flood comes from a
server on 127.0.0.1 that is the proxy or the room itself; real clock, bounded
by ``trio.fail_after``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio

from letagents_trio import RoomClient, RoomUnreachable
from letagents_trio._http import HTTPFailure, HTTPXStack, Stack
from letagents_trio._http._request import MAX_INFORMATIONAL

from ..proxy_env import clear_proxy_environment
from ..test_http_floods import ANSWER, informational, open_stream, send_exit

# One read's worth of heads: httpcore2 reads 64 KiB at a time.
FLOOD = informational(2_400)
ROOM = "http://room.test"
MESSAGES = "/rooms/r/messages"


@pytest.fixture(autouse=True)
def own_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxy_environment(monkeypatch)


async def _read_request(stream: trio.SocketStream) -> bool:
    """Read one request, head and body; False when the client has gone."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    for field in head.split(b"\r\n")[1:]:
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            while len(body) < int(value):
                body += await stream.receive_some()
    return True


@asynccontextmanager
async def flooding_server(count: int | None) -> AsyncIterator[str]:
    """A server on 127.0.0.1 answering each request with ``count`` 1xx heads and then
    ``{}``, or (``None``) with 1xx heads until the client goes; yields its URL."""

    async def serve(stream: trio.SocketStream) -> None:
        try:
            while await _read_request(stream):
                if count is None:
                    while True:
                        await stream.send_all(FLOOD)
                await stream.send_all(informational(count) + ANSWER)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.cancel_scope.cancel(reason="test over")


@asynccontextmanager
async def client_of(
    monkeypatch: pytest.MonkeyPatch, server: str, via: str
) -> AsyncIterator[RoomClient]:
    """A client whose requests reach ``server``: as its proxy, or as the room itself."""
    if via == "proxy":
        monkeypatch.setenv("HTTP_PROXY", server)
    async with RoomClient(ROOM if via == "proxy" else server, owner_token="t") as client:
        yield client


@pytest.mark.parametrize("via", ["proxy", "room"])
async def test_a_flood_fails_even_a_call_without_a_deadline(
    monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    with trio.fail_after(10):
        async with flooding_server(None) as server, client_of(monkeypatch, server, via) as client:
            with pytest.raises(RoomUnreachable, match=r"failed: TooManyInformational$"):
                await client.call("GET", MESSAGES, bounded=False)


@pytest.mark.parametrize("send", [send_exit, open_stream], ids=["exit", "stream"])
async def test_a_flood_fails_the_process_connections_requests_through_a_proxy(
    monkeypatch: pytest.MonkeyPatch, send: Callable[[Stack, str], Awaitable[None]]
) -> None:
    with trio.fail_after(10):
        async with (
            flooding_server(None) as server,
            client_of(monkeypatch, server, "proxy") as client,
        ):
            assert isinstance(client._stack, HTTPXStack)
            with pytest.raises(HTTPFailure, match=r"^TooManyInformational$"):
                await send(client._stack, ROOM + "/rooms/r/agent-sessions/s/process/exit")


@pytest.mark.parametrize("via", ["proxy", "room"])
async def test_a_few_informational_answers_are_skipped_on_the_httpx2_path(
    monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """Up to ``MAX_INFORMATIONAL`` before each answer, on one kept-alive connection."""
    with trio.fail_after(10):
        async with (
            flooding_server(MAX_INFORMATIONAL) as server,
            client_of(monkeypatch, server, via) as client,
        ):
            for _ in range(3):
                assert await client.call("GET", MESSAGES) == {}
            if via == "proxy":
                await send_exit(client._stack, ROOM + "/rooms/r/agent-sessions/s/process/exit")
                await open_stream(client._stack, ROOM + "/rooms/r/agent-sessions/s/process")
