"""Exits pipelined over the lean path's TLS (``letagents_trio._http._pool`` over ``_tls``).

A hosted room is HTTPS: a goodbye's exits go out on a few TLS connections,
written at once as they are asked, as on a plain socket. The room is the
scripted one of ``tests/test_http_pool.py`` behind ``trio.SSLStream`` with a
certificate made for the test, over loopback; the real clock, bounded by
``trio.fail_after``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from letagents_trio._http._pool import PipelinedPool

from ..test_http_pool import (
    ORIGIN,
    HeldBackRoom,
    ScriptedRoom,
    big_request,
    exit_request,
    session_of,
)
from .tiny_room import self_signed

if TYPE_CHECKING:
    from pathlib import Path


async def tls_room(tmp_path: Path, nursery: trio.Nursery) -> HeldBackRoom:
    server, client = self_signed(tmp_path)
    room = HeldBackRoom(ScriptedRoom(nursery=nursery), server=server, client=client)
    await room.start(nursery)
    return room


async def test_once_connected_a_request_is_written_over_tls_before_its_callers_first_checkpoint(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """An exit asked by a caller already past its deadline still goes out over
    TLS, in one record, and its caller is told so."""
    room = await tls_room(tmp_path, nursery)
    room.go.set()
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    told: list[str] = []
    with trio.fail_after(10):
        await pool.exchange(exit_request(1), max_body=1024)
        with trio.CancelScope() as late:
            late.cancel()
            await pool.exchange(exit_request(2), max_body=1024, sent=lambda: told.append("out"))
        assert late.cancelled_caught
        assert told == ["out"]
        await pool.aclose()
        await room.served.wait()
    assert [session_of(t) for _, _, t, _ in room.room.seen] == ["s1", "s2"]


async def test_a_record_the_kernel_takes_a_part_of_is_told_written_once_the_rest_is(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A request of a megabyte while the room reads nothing: the kernel takes
    the start of its record, and its caller is told only once the rest is out,
    by the caller's own writing turn, as the room reads."""
    room = await tls_room(tmp_path, nursery)
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    told: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as callers:
            callers.start_soon(
                lambda: pool.exchange(
                    big_request(1, 1 << 20), max_body=1024, sent=lambda: told.append("out")
                )
            )
            await trio.testing.wait_all_tasks_blocked()
            assert told == []
            room.go.set()
        assert told == ["out"]
        await pool.aclose()
        await room.served.wait()
    assert [len(body) for _, body in room.room.requests] == [1 << 20]
