"""wait_for_messages: the timeout clamp, the client abort, and cancellation by the host.

In-memory client and FakeRoom under ``autojump_clock``: every wait is asserted
at its exact virtual time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._wait_tool import clamp_poll_timeout, poll_abort_after
from letagents_trio.testing import FakeRoom, open_fake_room

from .helpers import ROOM, call_ok, config_for, register


@given(
    timeout=st.one_of(st.none(), st.floats(min_value=-1e12, max_value=1e12)),
    cap=st.integers(min_value=1_000, max_value=86_400_000),
)
def test_clamp_is_upstreams(timeout: float | None, cap: int) -> None:
    """clamp(timeout or 30 000, 1 000, cap), in whole milliseconds."""
    wanted = timeout if timeout else 30_000
    assert clamp_poll_timeout(timeout, cap) == int(min(max(wanted, 1_000), cap))
    assert 1_000 <= clamp_poll_timeout(timeout, cap) <= cap


@pytest.mark.parametrize(
    ("server_ms", "abort_ms"),
    [(1_000, 6_000), (120_000, 125_000), (120_001, 240_001), (180_000, 300_000)],
)
def test_abort_margin(server_ms: int, abort_ms: int) -> None:
    """The client gives up 5 s after the poll, or 120 s after for polls over 120 s."""
    assert poll_abort_after(server_ms) == abort_ms


async def _worker(client: Client) -> str:
    registered = await register(client, "k")
    worker_id = registered["worker_id"]
    assert isinstance(worker_id, str)
    return worker_id


@pytest.mark.parametrize(
    ("wait_ms", "waited"),
    [(None, 30.0), (0, 30.0), (10, 1.0), (2_500, 2.5), (10_000_000, 60.0)],
)
async def test_an_empty_room_is_waited_on_for_the_clamped_time(
    autojump_clock: trio.testing.MockClock,
    fake_room: FakeRoom,
    tmp_path: Path,
    wait_ms: float | None,
    waited: float,
) -> None:
    """The room holds the poll for exactly the clamped timeout (cap 60 000 ms here)."""
    config = config_for(fake_room, tmp_path, poll_max_ms=60_000)
    with trio.fail_after(100):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            worker_id = await _worker(client)
            args: dict[str, object] = {"worker_id": worker_id, "after_message_id": "0"}
            if wait_ms is not None:
                args["timeout"] = wait_ms
            start = trio.current_time()
            result = await call_ok(client, "wait_for_messages", args)
            assert trio.current_time() - start == waited
    assert result["messages"] == []
    assert result["room_id"] == ROOM


async def test_a_message_ends_the_wait_at_once(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A message sent 3 s into a 30 s wait is returned at 3 s."""
    with trio.fail_after(100):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server) as client:
            waiter = await _worker(client)
            sender = (await register(client, "k2", "Cedar"))["worker_id"]
            start = trio.current_time()
            results: list[dict[str, Any]] = []

            async def wait() -> None:
                results.append(
                    await call_ok(
                        client,
                        "wait_for_messages",
                        {"worker_id": waiter, "after_message_id": "0", "timeout": 30_000},
                    )
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep(3)
                await call_ok(client, "send_message", {"worker_id": sender, "text": "hello"})
            assert trio.current_time() - start == 3
    (result,) = results
    assert [m["text"] for m in result["messages"]] == ["hello"]


async def test_cancelled_wait_returns_at_once_and_closes_the_poll(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """The host cancels a 30 s wait after 2 s: notifications/cancelled reaches the handler,
    the call is cancelled at its scope, and the room sees its poll closed at that moment."""
    async with open_fake_room() as room:
        with trio.fail_after(100):
            server = create_server(config_for(room, tmp_path), transport=room.transport)
            async with Client(server, mode="legacy") as client:
                worker_id = await _worker(client)
                start = trio.current_time()
                with trio.move_on_after(2) as scope:
                    await client.call_tool(
                        "wait_for_messages",
                        {"worker_id": worker_id, "after_message_id": "0", "timeout": 30_000},
                    )
                assert scope.cancelled_caught
                assert room.room.statistics().open_polls == 1  # not yet told
                await trio.testing.wait_all_tasks_blocked()
                assert room.room.statistics().open_polls == 0
                assert trio.current_time() - start == 2
                # The server is still serving: the next call works.
                await call_ok(client, "read_messages", {"worker_id": worker_id})


async def test_a_45_s_wait_survives_a_20_s_timeout_that_progress_resets(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Progress every 15 s keeps a host's 20 s reset-on-progress timeout from cutting the wait.

    The SDK has a per-request timeout but no reset on progress; the host's
    is this test's: a deadline 20 s ahead, moved on every progress notification.
    """
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    beats: list[tuple[float, float]] = []
    async with Client(server) as client:
        worker_id = await _worker(client)
        started = trio.current_time()
        with trio.CancelScope(deadline=started + 20) as host_timeout:

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                await trio.lowlevel.checkpoint()
                beats.append((trio.current_time() - started, progress))
                host_timeout.deadline = trio.current_time() + 20

            result = await client.call_tool(
                "wait_for_messages",
                {"worker_id": worker_id, "timeout": 45_000},
                progress_callback=on_progress,
            )
        waited = trio.current_time() - started
    assert not host_timeout.cancelled_caught
    assert not result.is_error
    assert waited == 45.0
    # At 45 s the answer and a third beat are due together; either may come first.
    assert beats[:2] == [(15.0, 1), (30.0, 2)]
    assert beats[2:] in ([], [(45.0, 3)])


async def test_without_a_progress_token_a_long_wait_still_answers(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """No ``_meta.progressToken``: the SDK sends no progress, and the wait is the same."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    async with Client(server) as client:
        worker_id = await _worker(client)
        started = trio.current_time()
        await call_ok(client, "wait_for_messages", {"worker_id": worker_id, "timeout": 45_000})
    assert trio.current_time() - started == 45.0
