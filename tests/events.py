"""Helpers the core's tests share: reading a subscription, a goodbye's ``stop`` that never ends."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from letagents_trio import HolderEvent


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
