"""Floods of informational answers on the process connection's requests (issue 30 row 7).

A room that answers an exit with thousands of ``1xx`` heads before its answer
made the client parse them all without a checkpoint (0.10 s loop stalls, the
goodbye stretched past its deadline). Past ``MAX_INFORMATIONAL`` the request
fails instead, on the exit's kept-alive path and on the stream's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio._http import LeanStack, Origin, Stack
from letagents_trio._http._request import MAX_INFORMATIONAL, HTTPFailure

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

URL = "http://room.test/rooms/r/agent-sessions/s/process/exit"
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def informational(count: int) -> bytes:
    return b"HTTP/1.1 102 Processing\r\n\r\n" * count


class ScriptedOpener:
    """An opener whose every connection answers ``answer`` to whatever it is sent."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        await server.send_all(self.answer)
        return client


async def send_exit(stack: Stack, url: str = URL) -> None:
    """An exit's request, its answer read whole."""
    await stack.exchange("POST", url, [], b"{}", max_body=1024)


async def open_stream(stack: Stack, url: str = URL) -> None:
    """A process stream's request, closed once its head is in."""
    response = await stack.start("GET", url, [], None)
    await response.aclose()


@pytest.mark.parametrize("send", [send_exit, open_stream], ids=["exit", "stream"])
async def test_a_flood_of_informational_answers_fails_the_request(
    autojump_clock: trio.testing.MockClock, send: Callable[[Stack], Awaitable[None]]
) -> None:
    stack = LeanStack(ScriptedOpener(informational(MAX_INFORMATIONAL + 1) + ANSWER))
    with trio.fail_after(1), pytest.raises(HTTPFailure, match=r"^TooManyInformational$"):
        await send(stack)


async def test_a_few_informational_answers_are_skipped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stack = LeanStack(ScriptedOpener(informational(MAX_INFORMATIONAL) + ANSWER))
    with trio.fail_after(1):
        answer = await stack.exchange("POST", URL, [], b"{}", max_body=1024)
        assert (answer.status, answer.body) == (200, b"{}")
        response = await LeanStack(ScriptedOpener(informational(MAX_INFORMATIONAL) + ANSWER)).start(
            "GET", URL, [], None
        )
        assert response.status == 200
        await response.aclose()
