"""Helpers the core's tests share: reading a subscription, a goodbye's ``stop`` that
never ends, a connector that passes every call on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from letagents_trio import AgentSession, HolderEvent, ProcessConnector, StreamNews


def drain(events: trio.MemoryReceiveChannel[HolderEvent]) -> list[HolderEvent]:
    """Every event the subscription holds now, without waiting."""
    out = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


class NeverStops:
    """A ``stop`` for :meth:`ProcessConnector.goodbye` that never returns; records each call."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self) -> None:
        self.calls.append(trio.current_time())
        await trio.sleep_forever()


class Delegating:
    """A :class:`~letagents_trio.ProcessConnector` that passes every call to ``inner``.

    Tests subclass it to note or change the one call they are about.
    """

    def __init__(self, inner: ProcessConnector) -> None:
        self.inner = inner

    def open(self, session: AgentSession) -> AbstractAsyncContextManager[AsyncIterator[StreamNews]]:
        return self.inner.open(session)

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        return await self.inner.announce_exit(session, connection_id)

    async def goodbye(
        self,
        session: AgentSession,
        connection_id: str | None,
        stop: Callable[[], Awaitable[None]],
    ) -> bool | None:
        return await self.inner.goodbye(session, connection_id, stop)

    def leave_now(self, session: AgentSession, connection_id: str | None) -> bool:
        return self.inner.leave_now(session, connection_id)
