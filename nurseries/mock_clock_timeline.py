"""The virtual-time timeline of one held process connection, under trio's MockClock.

For maintainers who test timing: a scripted in-memory room (``FakeRoom``, the
reference room with faults on demand) misbehaves on a schedule, and the
connection manager's event stream prints what the holder did and when. No
sockets and no threads, so ``MockClock(autojump_threshold=0)`` runs the whole
two minutes of story in milliseconds, and every time printed is exact.

The story: the stream opens; the room drops it at 20 s (reopened 1 s later);
from 30 s the room accepts connections but sends nothing (silence ends the
attempt 45 s after the last byte); from 76.5 s it refuses them (waits of 5 s
and 15 s); at 90 s it serves again (the holder is back at 97 s); at 100 s the
process stops and announces its exit.

Run it: ``python nurseries/mock_clock_timeline.py``. Its output is checked in
beside it (``mock_clock_timeline.txt``) and a test compares the two.

SIGTERM stops the story where it is, as it stops any trio program that opens
a signal receiver around its own scope: the process stops at that moment of
trio time and announces its exit. With ``--hold`` the story pauses at 25 s
(the clock stands still: no autojump) until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import math
import signal
import sys
from collections.abc import AsyncIterator

import trio
import trio.testing

from letagents_trio import EventKind, HolderEvent, open_connection_manager
from letagents_trio.testing import FakeRoom, ProcessMode, open_fake_room

# With --hold the story pauses here, in seconds of trio time.
HOLD_AT = 25


async def script(room: FakeRoom, session_id: str, hold: bool = False) -> None:
    """The room's misbehaviour, on a schedule of trio time."""
    await trio.sleep_until(20)
    room.drop(session_id)
    if hold:
        await hold_still(HOLD_AT)
    await trio.sleep_until(30)
    room.set_process_mode(ProcessMode.SILENT)
    room.drop(session_id)
    await trio.sleep_until(76.5)
    room.set_process_mode(ProcessMode.REFUSED)
    await trio.sleep_until(90)
    room.set_process_mode(ProcessMode.SERVED)
    await trio.sleep_until(100)


async def hold_still(at: float) -> None:
    """Stop trio's clock at ``at`` (no more autojumps) until the story is cancelled."""
    await trio.sleep_until(at)
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    clock.autojump_threshold = math.inf
    print(f"holding at {trio.current_time():g} s of trio time until stopped", flush=True)
    await trio.sleep_forever()


async def stop_on_signal(signals: AsyncIterator[int], story: trio.CancelScope) -> None:
    """Stop the story at the first signal, at this moment of trio time, the clock running again."""
    async for signum in signals:
        print(f"{signal.Signals(signum).name}: stopping at {trio.current_time():g} s", flush=True)
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        clock.autojump_threshold = 0
        story.cancel(reason=f"{signal.Signals(signum).name}")
        return


def describe(event: HolderEvent, connections: dict[str, int]) -> str:
    """One timeline line; connection ids (random UUIDs) are shown as #1, #2, …"""

    def connection(cid: str | None) -> str:
        if cid is None:
            return "no open connection"
        return f"#{connections.setdefault(cid, len(connections) + 1)}"

    kind = event.kind
    if kind is EventKind.CONNECTION:
        text = f"the room named it {connection(event.connection_id)}"
    elif kind is EventKind.CLOSED:
        assert event.outcome is not None
        text = f"{event.outcome.value} ({event.detail})"
    elif kind is EventKind.BACKOFF:
        text = f"next attempt in {event.delay:g} s"
    elif kind is EventKind.EXIT:
        text = f"{event.detail}, naming {connection(event.connection_id)}"
    else:
        text = event.detail
    return f"{event.time:7.1f}  {kind.value:<10} {text}".rstrip()


async def main(hold: bool = False) -> None:
    async with open_fake_room() as room:
        session = await room.add_worker(display_name="Juniper")
        timeline: list[HolderEvent] = []
        async with (
            room.client() as client,
            open_connection_manager(client, owner_mode=True) as manager,
        ):
            with manager.subscribe(math.inf) as events:
                manager.hold(session)
                # The program's own scope: SIGTERM (or Ctrl-C) cancels it where it is.
                with (
                    trio.CancelScope() as story,
                    trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals,
                ):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(stop_on_signal, signals, story)
                        await script(room, session.session_id, hold)
                        nursery.cancel_scope.cancel(reason="the story is over")
                await manager.announce_exits()
                while True:
                    try:
                        timeline.append(events.receive_nowait())
                    except trio.WouldBlock:
                        break
        print(f"timeline of {session.display_name}'s process connection (seconds of trio time)")
        connections: dict[str, int] = {}
        for event in timeline:
            print(describe(event, connections))
        [exit_record] = room.exits
        print(f"the room recorded the exit at {exit_record.time:g} s: {exit_record.recorded}")


if __name__ == "__main__":
    trio.run(main, "--hold" in sys.argv[1:], clock=trio.testing.MockClock(autojump_threshold=0))
