"""Small helpers with no better home: module metadata, waiting for a condition, URLs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import final
from urllib.parse import urlsplit

import attrs
import trio


def is_http_url(url: str) -> bool:
    """Whether ``url`` is an ``http(s)://`` URL with a host (``localhost:3001`` is not one)."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def fixup_module_metadata(module_name: str, namespace: Mapping[str, object]) -> None:
    """Make re-exported names say where users import them from.

    ``letagents_trio.ProcessHolder`` is defined in ``letagents_trio._holder``;
    after this its ``__module__`` is ``letagents_trio``, so reprs, error messages
    and the docs show the public path (trio does the same in ``trio._util``).
    Only names defined in this package's private modules are touched.
    """
    for name, value in namespace.items():
        if name.startswith("_"):
            continue
        module = getattr(value, "__module__", None)
        if not isinstance(module, str) or not module.startswith("letagents_trio"):
            continue
        if not any(part.startswith("_") for part in module.split(".")[1:]):
            continue
        try:
            value.__module__ = module_name
        except (AttributeError, TypeError):
            continue


@final
@attrs.define(eq=False)
class Notifier:
    """Wait until a predicate holds, re-checked each time the owner says something changed.

    Like ``trio.Condition`` without the lock: state lives on one trio thread, so
    a predicate reads it safely between checkpoints. The owner calls
    :meth:`notify` after every change a waiter may care about; waiters park on a
    ``trio.lowlevel.ParkingLot`` in between, so nothing polls.
    """

    _lot: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot, init=False)

    def notify(self) -> None:
        """Wake every waiter to re-check its predicate (cheap when nobody waits)."""
        self._lot.unpark_all()

    @property
    def waiting(self) -> int:
        """How many tasks are parked waiting for a change."""
        return len(self._lot)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` is true, checking it now and after each :meth:`notify`.

        Cancellation:
            A checkpoint, also when the predicate already holds. Cancelled,
            nothing changes: bound the wait with ``trio.move_on_at`` or
            ``trio.fail_after``.
        """
        while not predicate():
            await self._lot.park()
        await trio.lowlevel.checkpoint()
