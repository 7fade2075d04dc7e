"""One call per key at a time: later callers wait for the first and share its result.

Two chats of one process may ask to register the same worker in the same room
at once (PROTOCOL §6.4: registrations in flight are de-duplicated). The first
caller *leads*: it runs the call. Others *join*: they wait for the leader and
take its value, or its exception. When the leader is cancelled, the joiners
do not inherit the cancellation: the next one leads a call of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar, final

import attrs
import trio

__all__ = ["SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@final
@attrs.define(eq=False)
class _Flight(Generic[V]):
    done: trio.Event = attrs.field(factory=trio.Event)
    value: V | None = None
    ran: bool = False
    error: Exception | None = None


@final
class SingleFlight(Generic[K, V]):
    """Runs at most one call per key; concurrent callers of a key share it."""

    def __init__(self) -> None:
        self._flights: dict[K, _Flight[V]] = {}

    def __len__(self) -> int:
        """How many calls are in flight."""
        return len(self._flights)

    async def run(self, key: K, call: Callable[[], Awaitable[V]]) -> tuple[V, bool]:
        """Run ``call`` for ``key``, or join the one in flight; return (value, led).

        ``led`` is true for the caller that ran the call.

        Raises:
            Exception: whatever the call raised, to the leader and every joiner.

        Cancellation:
            A checkpoint. A cancelled joiner stops waiting; a cancelled leader
            lets the joiners go, and the first of them runs its own call.
        """
        while (flight := self._flights.get(key)) is not None:
            await flight.done.wait()
            if flight.error is not None:
                raise flight.error
            if flight.ran:
                return flight.value, False  # type: ignore[return-value]
            # The call we waited on was cancelled: run our own.
        flight = _Flight[V]()
        self._flights[key] = flight
        try:
            flight.value = await call()
            flight.ran = True
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[key]
            flight.done.set()
        return flight.value, True
