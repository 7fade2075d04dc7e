"""The one seam (``choose_stack``) and the httpx2 stack's responses (``_http._httpx``).

In memory, under the mock clock: the testing kit's streaming transport serves
an app a test writes, and a transport of this file's own answers ``101`` with
a network stream the test scripts. Over real sockets and proxies see
tests/e2e/test_httpx_path.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio import AgentSession, RoomClient, RoomUnreachable
from letagents_trio._http import (
    Answer,
    HTTPFailure,
    HTTPXStack,
    LeanStack,
    NetworkOpener,
    Origin,
    choose_stack,
    proxy_configured,
)
from letagents_trio.testing import StreamingASGITransport
from letagents_trio.testing._transport import open_streaming_transport

from .proxy_env import clear_proxy_environment

if TYPE_CHECKING:
    from letagents_trio.testing._asgi import Message, Receive, Send

API = "http://room.test"
SESSION = AgentSession(session_id="wsess_1", session_token="secret-token-1", room_id="room_a")
PROCESS = f"{API}/rooms/room_a/agent-sessions/wsess_1/process"


@pytest.fixture(autouse=True)
def own_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxy_environment(monkeypatch)


class NoOpener:
    async def open_stream(self, origin: Origin) -> trio.abc.Stream:  # pragma: no cover
        raise AssertionError("not used")


def never_made() -> httpx2.AsyncClient:  # pragma: no cover - choose_stack must not call it
    raise AssertionError("the httpx2 client was made")


# --- choose_stack: four rules, decided once ------------------------------------------------


def test_an_opener_is_the_lean_path_over_it_whatever_else_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    opener = NoOpener()
    stack = choose_stack(opener=opener, transport=Switching(200, None), http_client=never_made)
    assert isinstance(stack, LeanStack)
    assert stack.opener is opener


def test_a_transport_without_an_opener_is_httpx2() -> None:
    assert not proxy_configured()
    stack = choose_stack(opener=None, transport=Switching(200, None), http_client=never_made)
    assert isinstance(stack, HTTPXStack)


PROXIES = {
    "HTTP_PROXY": "http://proxy.example:3128",
    "HTTPS_PROXY": "http://proxy.example:3128",
    "ALL_PROXY": "socks5://proxy.example:1080",
    "http_proxy": "proxy.example:3128",  # no scheme: still a proxy
    "all_proxy": "http://proxy.example:3128",
}


@pytest.mark.parametrize(("name", "value"), PROXIES.items(), ids=PROXIES.keys())
def test_a_proxy_in_the_environment_is_httpx2(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert proxy_configured()
    assert isinstance(choose_stack(opener=None, transport=None, http_client=never_made), HTTPXStack)


NO_PROXIES = {
    "nothing": {},
    "NO_PROXY alone": {"NO_PROXY": "*"},
    "a scheme httpx2 does not mount": {"FTP_PROXY": "http://proxy.example:3128"},
    "an empty HTTP_PROXY": {"HTTP_PROXY": ""},
    "HTTP_PROXY under an empty http_proxy": {"HTTP_PROXY": "http://p:1", "http_proxy": ""},
    "HTTP_PROXY in a CGI program": {"HTTP_PROXY": "http://p:1", "REQUEST_METHOD": "GET"},
}


@pytest.mark.parametrize("environment", NO_PROXIES.values(), ids=NO_PROXIES.keys())
def test_otherwise_the_lean_path_over_the_network(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert not proxy_configured()
    stack = choose_stack(opener=None, transport=None, http_client=never_made)
    assert isinstance(stack, LeanStack)
    assert isinstance(stack.opener, NetworkOpener)


def test_the_choice_is_made_once_when_the_client_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    client = RoomClient(API)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert isinstance(client._stack, LeanStack)
    assert isinstance(RoomClient(API)._stack, HTTPXStack)


# --- the httpx2 stack's responses ------------------------------------------------------------


class App:
    """Answers ``GET …/process`` with ``chunks`` (then waits to be left, or ends), exits too."""

    def __init__(self, *chunks: bytes, end: bool = False, status: int = 200) -> None:
        self.chunks = chunks
        self.end = end
        self.status = status
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.disconnected = trio.Event()

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append((scope["method"], scope["path"], headers))
        start: Message = {
            "type": "http.response.start",
            "status": self.status,
            "headers": [(b"content-type", b"text/event-stream"), (b"X-Room", b"tiny")],
        }
        await send(start)
        for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if self.end:
            await send({"type": "http.response.body", "body": b""})
            return
        while (await receive())["type"] != "http.disconnect":
            pass  # pragma: no cover - receive waits for the disconnect
        self.disconnected.set()


@asynccontextmanager
async def client_of(app: Callable[..., Any]) -> AsyncIterator[RoomClient]:
    async with (
        open_streaming_transport(app) as transport,
        RoomClient(API, owner_token="owner-1", transport=transport) as client,
    ):
        assert isinstance(client._stack, HTTPXStack)
        yield client


async def test_a_response_reads_as_the_lean_paths_do(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = App(b"data: 1\n\n", b"data: 2\n\n", end=True)
    async with client_of(app) as client:
        response = await client.start_request(
            "GET", PROCESS, session=SESSION, headers={"Accept": "text/event-stream"}
        )
        assert response.status == 200
        assert repr(response) == "<_HTTPXResponse status=200>"
        assert response.header("x-room") == response.header("X-ROOM") == "tiny"
        assert response.header("retry-after") is None
        assert await response.next_chunk() == b"data: 1\n\n"
        assert await response.next_chunk() == b"data: 2\n\n"
        assert await response.next_chunk() == b""
        assert await response.next_chunk() == b""
        with pytest.raises(RuntimeError, match=r"^HTTP 200 did not switch protocols$"):
            response.detach()
        await response.aclose()
    [(method, path, headers)] = app.requests
    assert (method, path) == ("GET", "/rooms/room_a/agent-sessions/wsess_1/process")
    # The one header builder: the same credentials as the lean path's.
    assert headers["authorization"] == "Bearer owner-1"
    assert headers["x-letagents-agent-session-token"] == "secret-token-1"
    assert headers["accept"] == "text/event-stream"


async def test_closing_from_another_task_fails_the_read_waiting_and_leaves_the_room(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A holder leaving closes its response while its reader waits for the next event."""
    app = App(b": hello\n\n")
    async with client_of(app) as client:
        response = await client.start_request("GET", PROCESS, session=SESSION)
        assert await response.next_chunk() == b": hello\n\n"
        failures: list[HTTPFailure] = []

        async def read() -> None:
            with pytest.raises(HTTPFailure) as caught:
                await response.next_chunk()
            failures.append(caught.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.sleep(5)
            await response.aclose()
        await app.disconnected.wait()
        assert trio.current_time() == 5
    assert [str(failure) for failure in failures] == ["ClosedResourceError"]


@pytest.mark.parametrize("read_first", [False, True])
async def test_closing_between_reads_leaves_the_room(
    autojump_clock: trio.testing.MockClock, read_first: bool
) -> None:
    app = App(b": hello\n\n")
    async with client_of(app) as client:
        response = await client.start_request("GET", PROCESS, session=SESSION)
        if read_first:
            assert await response.next_chunk() == b": hello\n\n"
        await response.aclose()
        with trio.fail_after(1):
            await app.disconnected.wait()


async def test_a_request_that_fails_is_room_unreachable_naming_only_the_kind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def refusing(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await trio.lowlevel.checkpoint()
        raise httpx2.ConnectError("refused secret-token-1")

    async with client_of(refusing) as client:
        with pytest.raises(RoomUnreachable) as caught:
            await client.start_request("GET", PROCESS, session=SESSION)
        with pytest.raises(RoomUnreachable) as exit_caught:
            await client.announce_exit(SESSION, "pc_1")
    assert str(caught.value) == (
        "GET /rooms/room_a/agent-sessions/wsess_1/process failed: ConnectError"
    )
    assert str(exit_caught.value).endswith("/process/exit failed: ConnectError")
    assert isinstance(caught.value.__cause__, HTTPFailure)


async def test_a_body_that_breaks_is_an_http_failure_naming_the_kind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def breaking(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data", "more_body": True})
        raise httpx2.ReadError("reset")

    async with client_of(breaking) as client:
        response = await client.start_request("GET", PROCESS, session=SESSION)
        assert await response.next_chunk() == b"data"
        with pytest.raises(HTTPFailure, match=r"^ReadError$"):
            await response.next_chunk()
        await response.aclose()


# --- exchange: the exit's whole answer, within a cap -----------------------------------------


def answering(status: int, body: bytes) -> Callable[..., Any]:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"3")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        # In pieces, so the cap is met on the way rather than by a declared length.
        for offset in range(0, len(body), 100):
            piece = body[offset : offset + 100]
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


async def test_exchange_reads_the_whole_answer_up_to_its_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = b'{"recorded":true}' + b" " * 1007
    async with open_streaming_transport(answering(202, body)) as transport:
        stack = HTTPXStack(lambda: httpx2.AsyncClient(transport=transport))
        answer = await stack.exchange("POST", PROCESS + "/exit", [], b"{}", max_body=1024)
        assert answer == Answer(
            202,
            ((b"content-type", b"application/json"), (b"retry-after", b"3")),
            body,
        )
        assert answer.header("Retry-After") == "3"
        with pytest.raises(HTTPFailure, match=r"^BodyTooLarge$"):
            await stack.exchange("POST", PROCESS + "/exit", [], b"{}", max_body=1023)


async def test_an_oversized_exit_answer_is_refused_and_the_room_left(
    autojump_clock: trio.testing.MockClock,
) -> None:
    left = trio.Event()

    async def endless(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(64):  # 256 KiB, four times the cap
            await send({"type": "http.response.body", "body": b" " * 4096, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass  # pragma: no cover - receive waits for the disconnect
        left.set()

    async with client_of(endless) as client:
        with pytest.raises(RoomUnreachable, match=r"/process/exit failed: BodyTooLarge$"):
            await client.announce_exit(SESSION, "pc_1")
        with trio.fail_after(1):
            await left.wait()


async def test_the_stacks_close_leaves_the_clients_httpx2_client_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_streaming_transport(answering(200, b"{}")) as transport:
        http = httpx2.AsyncClient(transport=transport)
        stack = HTTPXStack(lambda: http)
        assert repr(stack) == "<HTTPXStack>"
        with trio.testing.assert_checkpoints():
            await stack.aclose()
        assert not http.is_closed
        assert (await stack.exchange("POST", API + "/x", [], b"", max_body=10)).body == b"{}"
        await http.aclose()


# --- detach: the raw stream after 101 ----------------------------------------------------------


class NetworkStream:
    """What httpx2 hands over after ``101``, scripted: reads from a list, writes recorded."""

    def __init__(self, *reads: bytes | Exception) -> None:
        self.reads = list(reads)
        self.written: list[bytes] = []
        self.asked: list[int] = []
        self.closed = False
        self.fail_writes = False
        self.fail_close = False

    async def read(self, max_bytes: int) -> bytes:
        await trio.lowlevel.checkpoint()
        self.asked.append(max_bytes)
        item = self.reads.pop(0) if self.reads else b""
        if isinstance(item, Exception):
            raise item
        return item

    async def write(self, buffer: bytes) -> None:
        await trio.lowlevel.checkpoint()
        if self.fail_writes:
            raise httpx2.WriteError("broken")
        self.written.append(buffer)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        self.closed = True
        if self.fail_close:
            raise OSError("already gone")


class Switching(httpx2.AsyncBaseTransport):
    """Answers every request with ``status``, handing over ``network_stream``."""

    def __init__(self, status: int, network_stream: NetworkStream | None) -> None:
        self.status = status
        self.network_stream = network_stream

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await trio.lowlevel.checkpoint()
        extensions = {} if self.network_stream is None else {"network_stream": self.network_stream}
        return httpx2.Response(self.status, headers={"Upgrade": "websocket"}, extensions=extensions)


async def test_after_101_the_network_stream_is_the_raw_stream() -> None:
    network = NetworkStream(b"frame", httpx2.ReadError("reset"))
    async with RoomClient(API, transport=Switching(101, network)) as client:
        response = await client.start_request("GET", PROCESS, headers={"Upgrade": "websocket"})
        assert response.status == 101
        raw = response.detach()
        assert isinstance(raw, trio.abc.Stream)
        await raw.send_all(bytearray(b"hello"))
        await raw.wait_send_all_might_not_block()
        assert network.written == [b"hello"]
        assert await raw.receive_some(10) == b"frame"
        with pytest.raises(trio.BrokenResourceError, match=r"^ReadError$"):
            await raw.receive_some()
        assert network.asked == [10, 65536]
        network.fail_writes = True
        with pytest.raises(trio.BrokenResourceError, match=r"^WriteError$"):
            await raw.send_all(b"more")
        with pytest.raises(trio.BrokenResourceError, match="cannot half-close"):
            await cast("trio.abc.HalfCloseableStream", raw).send_eof()
        network.fail_close = True
        await raw.aclose()  # a close that fails is still a close
        assert network.closed
        await response.aclose()


@pytest.mark.parametrize(
    ("status", "network_stream"), [(200, NetworkStream()), (101, None)], ids=["200", "no stream"]
)
async def test_detach_is_refused_unless_the_protocol_switched_with_a_stream(
    status: int, network_stream: NetworkStream | None
) -> None:
    async with RoomClient(API, transport=Switching(status, network_stream)) as client:
        response = await client.start_request("GET", PROCESS, headers={"Upgrade": "websocket"})
        with pytest.raises(RuntimeError, match=rf"^HTTP {status} did not switch protocols$"):
            response.detach()
        await response.aclose()


async def test_the_testing_transport_is_both_seams_when_given_as_both(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The kit's transport given as ``opener=`` too: the process connection is lean."""
    app = App(b": hello\n\n")
    async with open_streaming_transport(app) as transport:
        assert isinstance(transport, StreamingASGITransport)
        client = RoomClient(API, transport=transport, opener=transport)
        assert isinstance(client._stack, LeanStack)
        response = await client.start_request("GET", PROCESS, session=SESSION)
        assert repr(response) == "<HTTP1Response status=200>"
        await response.aclose()
        await client.aclose()
