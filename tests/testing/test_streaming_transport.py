"""The streaming in-process ASGI transport: bodies flow as sent, and disconnects are told.

Each test serves a tiny ASGI app through ``open_streaming_transport`` to a plain
``httpx2.AsyncClient``. Tests that wait on virtual time use ``autojump_clock``.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio.testing import StreamingASGITransport, open_streaming_transport
from letagents_trio.testing._transport import BODY_BUFFER_CHUNKS

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing._asgi import Receive, Send

BASE = "http://app.test"
START_OK = {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"yes")]}


def chunk(data: bytes, *, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


def client_for(transport: StreamingASGITransport) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=transport, base_url=BASE)


async def test_body_chunks_arrive_as_sent_before_the_app_finishes(
    autojump_clock: MockClock,
) -> None:
    may_go_on = trio.Event()
    finished = trio.Event()

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send(START_OK)
        await send(chunk(b"first"))
        await may_go_on.wait()  # a buffering transport would deadlock here
        await send(chunk(b"second"))
        await send(chunk(b"third", more=False))
        finished.set()

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            async with (
                client.stream("GET", "/") as response,
                aclosing(response.aiter_bytes()) as chunks,
            ):
                assert response.status_code == 200
                assert response.headers["x-app"] == "yes"
                assert await anext(chunks) == b"first"
                assert not finished.is_set()
                may_go_on.set()
                assert [c async for c in chunks] == [b"second", b"third"]
            assert finished.is_set()


async def test_the_app_gets_the_request_body_and_a_faithful_scope() -> None:
    seen: list[tuple[MutableMapping[str, Any], MutableMapping[str, Any]]] = []

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        seen.append((scope, await receive()))
        await send(START_OK)
        await send(chunk(b"ok", more=False))

    with trio.fail_after(5):
        async with (
            open_streaming_transport(app, client=("10.0.0.7", 4242)) as transport,
            client_for(transport) as client,
        ):
            response = await client.post("/rooms/a%2Fb/x?after=3", content=b'{"k":1}')
    assert response.text == "ok"
    [(scope, message)] = seen
    assert message == {"type": "http.request", "body": b'{"k":1}', "more_body": False}
    assert scope["method"] == "POST"
    assert scope["path"] == "/rooms/a/b/x"
    assert scope["raw_path"] == b"/rooms/a%2Fb/x"
    assert scope["query_string"] == b"after=3"
    assert scope["client"] == ("10.0.0.7", 4242)
    assert scope["server"] == ("app.test", 80)
    assert (b"content-length", b"7") in scope["headers"]


async def test_closing_the_response_tells_the_app_the_client_disconnected(
    autojump_clock: MockClock,
) -> None:
    told: list[str] = []
    done = trio.Event()

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()  # the request body
        await send(START_OK)
        await send(chunk(b"hello"))
        told.append((await receive())["type"])
        await send(chunk(b"dropped, not an error"))  # sends after the client left are dropped
        done.set()

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            async with (
                client.stream("GET", "/") as response,
                aclosing(response.aiter_bytes()) as chunks,
            ):
                assert await anext(chunks) == b"hello"
                await trio.sleep(3)
                assert told == []
            await done.wait()
            assert trio.current_time() == 3
    assert told == ["http.disconnect"]


async def test_a_slow_reader_holds_the_app_back_by_a_small_buffer() -> None:
    sent = 0

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        nonlocal sent
        await send(START_OK)
        for _ in range(10 * BODY_BUFFER_CHUNKS):
            await send(chunk(b"x" * 1000))
            sent += 1

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            async with client.stream("GET", "/") as response:
                await trio.testing.wait_all_tasks_blocked()
                assert sent == BODY_BUFFER_CHUNKS
                assert len(await response.aread()) == 10 * BODY_BUFFER_CHUNKS * 1000


async def test_an_app_writing_after_the_client_left_does_not_starve_others() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send(START_OK)
        if scope["path"] == "/spin":
            while True:  # never listens for the disconnect
                await send(chunk(b"spam"))
        await send(chunk(b"still served", more=False))

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            async with (
                client.stream("GET", "/spin") as response,
                aclosing(response.aiter_bytes()) as chunks,
            ):
                assert await anext(chunks) == b"spam"
            response = await client.get("/other")
            assert response.text == "still served"


async def test_an_app_failing_before_the_start_is_a_logged_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await trio.lowlevel.checkpoint()
        raise LookupError("bug in the app")

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            response = await client.get("/broken")
    assert response.status_code == 500
    assert response.text == "Internal Server Error"
    [record] = [r for r in caplog.records if r.name == "letagents_trio.testing"]
    assert record.levelno == logging.ERROR
    assert "GET /broken" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], LookupError)


async def test_an_app_returning_without_a_start_is_a_500() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await trio.lowlevel.checkpoint()

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            response = await client.get("/")
    assert response.status_code == 500


async def test_a_transport_error_before_the_start_reaches_the_client() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await trio.lowlevel.checkpoint()
        raise httpx2.ConnectError("connection refused")

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            with pytest.raises(httpx2.ConnectError, match="connection refused"):
                await client.get("/")


async def test_a_read_error_after_the_start_fails_the_clients_read() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send(START_OK)
        await send(chunk(b"partial"))
        raise httpx2.ReadError("connection reset")

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            async with (
                client.stream("GET", "/") as response,
                aclosing(response.aiter_bytes()) as chunks,
            ):
                assert await anext(chunks) == b"partial"
                with pytest.raises(httpx2.ReadError, match="connection reset"):
                    await anext(chunks)


async def test_a_bug_after_the_start_is_a_read_error_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send(START_OK)
        await send(chunk(b"partial"))
        raise KeyError("bug mid-response")

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            async with client.stream("GET", "/") as response:
                with pytest.raises(httpx2.ReadError):
                    await response.aread()
    assert any(r.levelno == logging.ERROR for r in caplog.records)


async def test_closing_a_client_keeps_the_shared_transport_open() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send(START_OK)
        await send(chunk(b"ok", more=False))

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport:
            async with client_for(transport) as client:
                assert (await client.get("/")).text == "ok"
            # httpx2 closed the transport with that client; others still use it.
            await transport.aclose()
            async with client_for(transport) as client:
                assert (await client.get("/")).text == "ok"


async def test_a_transport_whose_block_ended_refuses_new_requests() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send(START_OK)
        await send(chunk(b"ok", more=False))

    with trio.fail_after(5):
        async with open_streaming_transport(app) as left:
            pass
        async with client_for(left) as client:
            with pytest.raises(httpx2.ConnectError, match="closed"):
                await client.get("/")


async def test_leaving_the_block_cancels_endless_app_tasks(autojump_clock: MockClock) -> None:
    cancelled = trio.Event()

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    with trio.fail_after(5):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            with trio.move_on_after(1):
                await client.get("/")
    assert cancelled.is_set()


async def test_cancelling_while_waiting_for_headers_tells_the_app(
    autojump_clock: MockClock,
) -> None:
    told: list[tuple[str, float]] = []
    done = trio.Event()

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()
        message = await receive()  # never starts: waits for the client to give up
        told.append((message["type"], trio.current_time()))
        done.set()

    with trio.fail_after(30):
        async with open_streaming_transport(app) as transport, client_for(transport) as client:
            with trio.move_on_after(7) as scope:
                await client.get("/")
            assert scope.cancelled_caught
            await done.wait()
    assert told == [("http.disconnect", 7)]


def test_the_transport_class_is_an_httpx2_transport() -> None:
    assert issubclass(StreamingASGITransport, httpx2.AsyncBaseTransport)
