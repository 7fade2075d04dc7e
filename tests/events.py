"""Helpers the core's tests share: reading a subscription, a connector that passes
every call on."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from letagents_trio import AgentSession, HolderEvent, ProcessConnector, ProcessStream


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
