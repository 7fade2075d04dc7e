"""Helpers the core's tests share: reading a subscription, a connector that passes
every call on, scripted streams."""

from __future__ import annotations

import functools
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

import trio

from letagents_trio import StreamNews

if TYPE_CHECKING:
    from letagents_trio import (
        AgentSession,
        HolderEvent,
        ProcessConnector,
        ProcessStream,
    )


def drain(events: trio.MemoryReceiveChannel[HolderEvent]) -> list[HolderEvent]:
    """Every event the subscription holds now, without waiting."""
    out = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


class Delegating:
    """A :class:`~letagents_trio.ProcessConnector` that passes every call to ``inner``.

    Tests subclass it to note or change the one call they are about.
    """

    def __init__(self, inner: ProcessConnector) -> None:
        self.inner = inner

    def open(self, session: AgentSession) -> AbstractAsyncContextManager[ProcessStream]:
        return self.inner.open(session)

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        return await self.inner.announce_exit(session, connection_id)


class ScriptedStream:
    """A :class:`~letagents_trio.ProcessStream` for the core's tests.

    Gives ``news`` in turn (one per read, each read a checkpoint), then waits
    until it is closed, and ends. It has no exit of its own, as SSE: leaving
    closes it, then POSTs through ``post`` (its connector's ``announce_exit``
    for its session). Tests subclass it to change the one method they are about.
    """

    def __init__(
        self, *news: StreamNews, post: Callable[[str | None], Awaitable[bool]] | None = None
    ) -> None:
        self._news = list(news)
        self._post = post
        self.closed = trio.Event()
        self.heard_at = trio.current_time()

    def __aiter__(self) -> ScriptedStream:
        return self

    async def __anext__(self) -> StreamNews:
        if self._news:
            await trio.lowlevel.checkpoint()
            self.heard_at = trio.current_time()
            return self._news.pop(0)
        await self.closed.wait()
        raise StopAsyncIteration

    def leave_nowait(self, connection_id: str) -> bool | None:
        return False

    async def leave(self, connection_id: str) -> bool | None:
        await self.aclose()
        if self._post is None:
            raise AssertionError("this stream's exit was not expected")
        return await self._post(connection_id)

    async def aclose(self) -> None:
        self.closed.set()
        await trio.lowlevel.checkpoint()


class SlowToUnwind:
    """A connector whose streams take 0.1 s to close and say whether the collector ran then."""

    def __init__(self) -> None:
        self.collector_enabled_while_closing: list[bool] = []

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ScriptedStream]:
        try:
            yield ScriptedStream(
                StreamNews(connection_id=f"conn-{session.session_id}"),
                post=functools.partial(self.announce_exit, session),
            )
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.1)
            self.collector_enabled_while_closing.append(gc.isenabled())

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        await trio.lowlevel.checkpoint()
        return True
