"""Progress while a tool waits, so a host that resets its timeout on progress keeps waiting.

MCP client SDKs time a request out after 60 s unless progress arrives. A
``wait_for_messages`` may last the poll maximum (180 s), and a registration the
room holds while a name passes on (PROTOCOL §7.3) takes up to 15.5 s without
a word: :func:`with_progress` sends ``notifications/progress`` (1, 2, 3, …)
with a message saying why, every ``interval`` seconds, while the call runs.
The SDK sends nothing when the call carried no ``_meta.progressToken``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NoReturn, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._facade import ToolContext

T = TypeVar("T")

__all__ = [
    "PROGRESS_INTERVAL",
    "REGISTRATION_PROGRESS",
    "REGISTRATION_PROGRESS_INTERVAL",
    "WAIT_PROGRESS",
    "with_progress",
]

# A wait reports this often, well inside the SDKs' 60 s.
PROGRESS_INTERVAL: Final = 15.0
WAIT_PROGRESS: Final = "waiting for messages"
# A registration reports early: seconds of silence would look like a hang.
REGISTRATION_PROGRESS_INTERVAL: Final = 2.0
REGISTRATION_PROGRESS: Final = (
    "waiting for the room's answer: a name passing on from a session whose process just"
    " stopped takes up to 15.5 s"
)


async def _report_progress(ctx: ToolContext, message: str, interval: float) -> NoReturn:
    """Send progress 1, 2, 3, … with ``message`` every ``interval`` seconds."""
    beat = 0
    while True:
        await trio.sleep(interval)
        beat += 1
        await ctx.report_progress(beat, message=message)


async def with_progress(
    ctx: ToolContext,
    wait: Callable[[], Awaitable[T]],
    *,
    message: str = WAIT_PROGRESS,
    interval: float = PROGRESS_INTERVAL,
) -> T:
    """``await wait()`` while reporting progress.

    An exception of ``wait`` leaves as itself (not in a group), so the tool's
    expected errors still become ``isError`` results.
    """
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_report_progress, ctx, message, interval)
            result = await wait()
            nursery.cancel_scope.cancel(reason="the wait is over")
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            # Deliberate: the tool's caller sees the one error, not a group of one.
            [sole] = group.exceptions
            raise sole from None
        raise
    return result
