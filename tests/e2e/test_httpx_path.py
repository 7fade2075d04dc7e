"""The httpx2 path over real loopback sockets: the environment's proxies, and upgrades.

One rule for every request of a client: with a proxy in the environment,
the process stream and the exit go through httpx2 as ordinary calls do, so
httpx2's proxy and ``NO_PROXY`` rules (the standard library's ``getproxies``)
decide for all three alike, and a proxy httpx2 cannot use fails all three
loudly. The room (:mod:`.tiny_room`) and the proxy
(:mod:`.tiny_proxy`) each record what reached them. The WebSocket form goes
to the reference room served by hypercorn. Real clock, bounded by
``trio.fail_after``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING

import attrs
import httpx2
import pytest
import trio
import trio.testing

from letagents_trio import (
    EventKind,
    HolderStatus,
    RoomClient,
    RoomUnreachable,
    WebSocketConnector,
    open_connection_manager,
)
from letagents_trio._client import _UNUSABLE_PROXY
from letagents_trio._http import HTTPFailure, HTTPXStack, LeanStack
from letagents_trio._sse_connector import STREAM_HEADERS
from letagents_trio.room_server import MemoryStore, Room, RoomConfig, serve_room
from letagents_trio.testing import register_worker

from ..proxy_env import clear_proxy_environment
from ..room_server.helpers import OWNER_TOKEN
from .tiny_proxy import TinyProxy
from .tiny_room import (
    MESSAGES,
    PROCESS,
    SESSION,
    TinyRoom,
    hold_and_exit,
    self_signed,
    serve_tiny_room,
)

if TYPE_CHECKING:
    from pathlib import Path

# The three kinds of request, as the room records them.
EVERY_REQUEST = [("GET", MESSAGES), ("GET", PROCESS), ("POST", PROCESS + "/exit")]


@pytest.fixture(autouse=True)
def own_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxy_environment(monkeypatch)


@attrs.define
class Loopback:
    """The tiny room and the tiny proxy, listening on 127.0.0.1."""

    room: TinyRoom
    proxy: TinyProxy
    api: str
    proxy_url: str


@asynccontextmanager
async def loopback(tls: object = None) -> AsyncIterator[Loopback]:
    room, proxy = TinyRoom(), TinyProxy()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_tiny_room, room, tls))  # type: ignore[arg-type]
        proxy_port = await nursery.start(proxy.serve)
        scheme = "http" if tls is None else "https"
        yield Loopback(
            room, proxy, f"{scheme}://127.0.0.1:{port}", f"http://127.0.0.1:{proxy_port}"
        )
        nursery.cancel_scope.cancel(reason="test over")


async def call_hold_and_exit(client: RoomClient) -> None:
    """An ordinary call, then the process stream held until named, then the exit."""
    assert await client.call("GET", MESSAGES, session=SESSION) == {"messages": []}
    assert await hold_and_exit(client) == ("pc_e2e", True)


# --- one rule for every request ---------------------------------------------------------

# Environments where every request goes direct, and the stack the process
# connection takes: httpx2 wherever ``getproxies`` finds a proxy (httpx2's
# NO_PROXY and per-scheme rules then send it direct), else the lean path.
DIRECT = {
    "NO_PROXY covers the room": ({"HTTP_PROXY": "{proxy}", "NO_PROXY": "127.0.0.0/8"}, HTTPXStack),
    "no_proxy=*": ({"HTTP_PROXY": "{proxy}", "no_proxy": "*"}, HTTPXStack),
    "HTTPS_PROXY is not for http": ({"HTTPS_PROXY": "{proxy}"}, HTTPXStack),
    "an empty lower-case http_proxy": ({"HTTP_PROXY": "{proxy}", "http_proxy": ""}, LeanStack),
    "CGI: REQUEST_METHOD ignores HTTP_PROXY": (
        {"HTTP_PROXY": "{proxy}", "REQUEST_METHOD": "GET"},
        LeanStack,
    ),
}


@pytest.mark.parametrize(("environment", "stack"), DIRECT.values(), ids=DIRECT.keys())
async def test_where_the_environment_says_direct_every_request_goes_direct(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], stack: type[object]
) -> None:
    with trio.fail_after(15):
        async with loopback() as net:
            for name, value in environment.items():
                monkeypatch.setenv(name, value.format(proxy=net.proxy_url))
            async with RoomClient(net.api, owner_token=OWNER_TOKEN) as client:
                assert type(client._stack) is stack
                await call_hold_and_exit(client)
    assert net.proxy.lines == []
    assert net.room.requests == EVERY_REQUEST


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
async def test_through_a_forwarding_proxy_every_request_goes_via_httpx2_and_reaches_the_room(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    with trio.fail_after(15):
        async with loopback() as net:
            monkeypatch.setenv(variable, net.proxy_url)
            async with RoomClient(net.api, owner_token=OWNER_TOKEN) as client:
                assert isinstance(client._stack, HTTPXStack)
                await call_hold_and_exit(client)
    assert net.proxy.lines == [f"{method} {net.api}{path}" for method, path in EVERY_REQUEST]
    assert net.room.requests == EVERY_REQUEST


async def test_an_https_room_through_a_proxy_is_tunnelled_with_connect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server_tls, _ = self_signed(tmp_path)
    # httpx2 trusts what SSL_CERT_FILE names, as it would a company's CA.
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    with trio.fail_after(15):
        async with loopback(server_tls) as net:
            monkeypatch.setenv("HTTPS_PROXY", net.proxy_url)
            async with RoomClient(net.api, owner_token=OWNER_TOKEN) as client:
                await call_hold_and_exit(client)
    authority = net.api.removeprefix("https://")
    assert net.proxy.lines
    assert set(net.proxy.lines) == {f"CONNECT {authority}"}
    assert net.room.requests == EVERY_REQUEST


def _socks_proxy(port: int) -> str:
    if importlib.util.find_spec("socksio") is not None:  # pragma: no cover
        pytest.skip("socksio is installed: httpx2 can use a SOCKS proxy")
    return f"socks5://user:s3cret@127.0.0.1:{port}"


UNUSABLE = {
    "SOCKS without socksio": _socks_proxy,
    "an unknown scheme": "ftp://user:s3cret@127.0.0.1:{}".format,
    "a URL httpx2 cannot parse": "http://user:s3cret@127.0.0.1:{}x".format,
}


@pytest.mark.parametrize("proxy_url", UNUSABLE.values(), ids=UNUSABLE.keys())
async def test_an_unusable_proxy_fails_every_request_and_none_goes_around_it(
    monkeypatch: pytest.MonkeyPatch, proxy_url: object
) -> None:
    assert callable(proxy_url)
    with trio.fail_after(15):
        async with loopback() as net:
            proxy_port = int(net.proxy_url.rsplit(":", 1)[1])
            monkeypatch.setenv("ALL_PROXY", proxy_url(proxy_port))
            async with RoomClient(net.api, owner_token=OWNER_TOKEN) as client:
                requests: list[Callable[[], Awaitable[object]]] = [
                    partial(client.call, "GET", MESSAGES, session=SESSION),
                    partial(
                        client.start_request,
                        "GET",
                        net.api + PROCESS,
                        session=SESSION,
                        headers=STREAM_HEADERS,
                    ),
                    partial(client.announce_exit, SESSION, "pc_e2e"),
                ]
                failures: list[RoomUnreachable] = []
                for request in requests:
                    with pytest.raises(RoomUnreachable) as caught:
                        await request()
                    failures.append(caught.value)
                # And so through the manager: the holder's attempts fail, the exit too.
                async with open_connection_manager(client) as manager:
                    with manager.subscribe(100) as events:
                        manager.hold(SESSION)
                        async for event in events:
                            if event.kind is EventKind.CLOSED:
                                break
                    report = await manager.announce_exits()
    assert [str(failure) for failure in failures] == [_UNUSABLE_PROXY] * 3
    assert all(
        isinstance(f.__cause__, ImportError | ValueError | httpx2.InvalidURL) for f in failures
    )
    assert [(a.recorded, a.error) for a in report] == [(None, "unreachable")]
    assert net.room.requests == []
    assert net.proxy.lines == []


async def test_without_a_proxy_the_lean_path_carries_the_process_connection() -> None:
    with trio.fail_after(15):
        async with loopback() as net:
            async with RoomClient(net.api, owner_token=OWNER_TOKEN) as client:
                assert isinstance(client._stack, LeanStack)
                await call_hold_and_exit(client)
    assert net.room.requests == EVERY_REQUEST


# --- the stream's response, closed from another task --------------------------------------


async def test_a_stream_closed_from_another_task_fails_the_read_waiting_on_it() -> None:
    """How a holder leaves: its response is closed while its reader waits for news."""
    with trio.fail_after(15):
        async with loopback() as net:
            transport = httpx2.AsyncHTTPTransport()
            async with RoomClient(net.api, transport=transport) as client:
                response = await client.start_request(
                    "GET", net.api + PROCESS, session=SESSION, headers=STREAM_HEADERS
                )
                assert response.status == 200
                assert response.header("content-type") == "text/event-stream"
                assert (await response.next_chunk()).startswith(b"event: open")
                failed: list[HTTPFailure] = []

                async def read() -> None:
                    with pytest.raises(HTTPFailure) as caught:
                        await response.next_chunk()
                    failed.append(caught.value)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read)
                    await trio.testing.wait_all_tasks_blocked()
                    await response.aclose()
    assert len(failed) == 1
    assert net.room.requests == [("GET", PROCESS)]


# --- the WebSocket form through httpx2 ------------------------------------------------------


@asynccontextmanager
async def reference_room() -> AsyncIterator[tuple[Room, str]]:
    room = Room(
        store=MemoryStore(),
        owner_tokens={OWNER_TOKEN: "owner"},
        config=RoomConfig(heartbeat_interval=15.0),
    )
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_room, room, port=0))
        yield room, url
        nursery.cancel_scope.cancel(reason="test over")


async def test_a_websocket_upgrade_through_an_httpx2_transport_holds_and_exits() -> None:
    """The upgraded stream is the ``network_stream`` httpx2 hands over after ``101``.

    Through a forwarding proxy: tests/e2e/test_websocket_loopback.py.
    """
    with trio.fail_after(20):
        async with reference_room() as (room, url):
            session = await register_worker(room, owner_token=OWNER_TOKEN, owner_login="owner")
            transport = httpx2.AsyncHTTPTransport()
            async with RoomClient(url, owner_token=OWNER_TOKEN, transport=transport) as client:
                assert isinstance(client._stack, HTTPXStack)
                connector = WebSocketConnector(client)
                async with open_connection_manager(client, connector=connector) as manager:
                    with manager.subscribe(100) as events:
                        holder = manager.hold(session)
                        async for event in events:
                            if event.kind is EventKind.CONNECTION:
                                break
                    assert holder.status is HolderStatus.OPEN
                    connection_id = holder.connection_id
                    row = room.session(session.session_id)
                    assert row is not None
                    assert row.process_connection_id == connection_id
                    report = await manager.announce_exits()
    # The exit went as a frame over the upgraded socket, and the room recorded it.
    assert [(a.connection_id, a.error) for a in report] == [(connection_id, None)]
    row = room.session(session.session_id)
    assert row is not None
    assert row.process_connection_id == "exited"
