"""The demo's story: what happens, step by step, and the shutdown that ends it.

The story plays inside one cancel scope (an interrupt cancels it):

0. Process 1 registers N durable workers and holds them; a rival process
   starts beside it.
1. **A drop**: the network drops a stream; its holder reopens it after 1 s.
2. **A room restart**: the room stops and is served again on the same port,
   same store; every holder comes back.
3. **A refusal**: the rival re-registers a worker with the predecessor proof,
   the room rotates the token, process 1's next attempt is refused and, since
   the demo's record of tokens says the session is no longer ours, its holder
   stops.
4. **A session the room ends** (``event: ended``).
5. **A name passing**: "Juniper" is held by process 2, so a new worker asking
   for it gets a codename; process 2 exits (exit announced) and the next
   worker asking for "Juniper" gets it.

Steps 1 and 2 need the embedded room's internals and are skipped against
another room; step 4 then goes through the room's disconnect route. Every
wait for a holder is bounded by :data:`STEP_TIMEOUT` and woken by events,
never polled.

**Shutdown.** Whatever ended the story, every remaining process is asked to
exit at the same moment (:meth:`Cast.running`), so all exits are announced
concurrently, each manager within its own ``exit_deadline``; only then does
the room stop. The summary lists every session ever held, with the time from
shutdown start to its announcement.

The story only orchestrates: the processes are the :class:`Cast`'s, the
room's the :class:`Venue`'s, and what is shown the :class:`Narrator`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Final, final

import trio
from rich.console import Console

from .._holder import HolderStatus
from .._policy import Outcome
from ._processes import Cast, Tracked, Venue, all_connected, open_venue
from ._values import WORKER_NAMES, DemoOptions, DemoReport, StepResult
from ._view import Narrator, Row, print_summary, step_line

__all__ = ["BEAT", "PASSED_NAME", "STEP_TIMEOUT", "Story", "run_demo"]

# The name that passes from process 2 to a new worker in the last step.
PASSED_NAME: Final = "Juniper"
# Pause between story steps at --speed 1, in seconds: time to read a step.
# Eight pauses plus about four seconds of reconnects: about 27 s in all.
BEAT: Final = 2.8
# The longest a step waits for the holders to do what it shows, in seconds.
# Reconnects after a drop take 1 s (2 s, 5 s if the room is still down).
STEP_TIMEOUT: Final = 20.0

PROCESS_1: Final = "process 1"
RIVAL: Final = "rival"
PROCESS_2: Final = "process 2"


@final
class Story:
    """Plays the story once, in ``venue``, told by a :class:`Narrator` on ``console``.

    Args:
        options: what to play.
        venue: where (the embedded room, or another).
        console: where to tell it.
        on_step: called with each finished step, as it finishes.
        t0: trio time of the demo's start; lines are stamped from it.
    """

    def __init__(
        self,
        options: DemoOptions,
        venue: Venue,
        console: Console,
        *,
        on_step: Callable[[StepResult], object] | None,
        t0: float,
    ) -> None:
        self.options = options
        self.venue = venue
        self.on_step = on_step
        self.steps: list[StepResult] = []
        self.codename: str | None = None
        self.passed_name: str | None = None
        self.interrupted = False
        self.view = Narrator(
            console,
            live=options.live,
            room_id=venue.room_id,
            rows=self._rows,
            steps=self._steps,
            t0=t0,
        )
        self.cast = Cast(venue, log=self.view.log, refresh=self.view.refresh)
        # The story runs in this scope; an interrupt cancels it (then exits are announced).
        self._story_scope = trio.CancelScope()

    def _rows(self) -> list[Row]:
        return self.cast.rows()

    def _steps(self) -> list[StepResult]:
        return self.steps

    # --- running it all ------------------------------------------------------------------

    async def play(self, interrupt: trio.Event | None) -> DemoReport:
        """Play the story, shut every process down, print the summary; returns the report."""
        where = "embedded" if self.venue.runner is not None else "external"
        self.view.say(f"The {where} room listens on {self.venue.api_url}.")
        with self.view.showing():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.view.tick)
                if interrupt is not None:
                    nursery.start_soon(self._on_interrupt, interrupt)
                async with self.cast.running():
                    with self._story_scope:
                        await self.story()
                    if self._story_scope.cancelled_caught:
                        self.view.say("Interrupted: every process exits and announces it.")
                nursery.cancel_scope.cancel(reason="the story is over")
        report = self.report()
        print_summary(self.view.console, report)
        return report

    async def _on_interrupt(self, interrupt: trio.Event) -> None:
        await interrupt.wait()
        self.interrupted = True
        self._story_scope.cancel(reason="interrupted")

    def report(self) -> DemoReport:
        """What happened so far."""
        return DemoReport(
            steps=tuple(self.steps),
            sessions=self.cast.summaries(),
            interrupted=self.interrupted,
            codename=self.codename,
            passed_name=self.passed_name,
        )

    # --- waiting on holders --------------------------------------------------------------

    async def until(self, condition: Callable[[], bool]) -> bool:
        """Wait (woken by events, bounded by STEP_TIMEOUT) until ``condition()``."""
        with trio.move_on_after(STEP_TIMEOUT):
            await self.cast.wait_until(condition)
            return True
        return False

    async def connected(self, *entries: Tracked, other_than: Mapping[str, str] = {}) -> bool:
        """Wait until each entry's holder has a named connection (not the one given)."""
        return await self.until(partial(all_connected, entries, other_than))

    async def pause(self) -> None:
        await trio.sleep(BEAT / self.options.speed)

    def step(self, number: int, title: str, status: str, detail: str) -> None:
        result = StepResult(number=number, title=title, status=status, detail=detail)
        self.steps.append(result)
        self.view.say(step_line(result))
        if self.on_step is not None:
            self.on_step(result)

    def target(self, index: int) -> Tracked:
        """Process 1's worker ``index`` (the last one with fewer workers), held now."""
        tracked = self.cast.tracked
        first = [e for e in tracked if e.process == PROCESS_1][: self.options.workers]
        worker = first[min(index, len(first) - 1)]
        for entry in reversed(tracked):
            if entry.session.session_id == worker.session.session_id and entry.running:
                return entry
        return worker

    # --- the story -----------------------------------------------------------------------

    async def story(self) -> None:
        cast = self.cast
        p1 = await cast.start_process(PROCESS_1)
        await cast.start_process(RIVAL)
        self.view.say(
            f"Process 1 registers {self.options.workers} workers and holds their connections."
        )
        for name in WORKER_NAMES[: self.options.workers]:
            session, worker_id = await cast.register(p1, name)
            cast.hold(p1, session, worker_id)
        workers = list(cast.tracked)
        if not await self.connected(*workers):
            self.view.say("[red]Not every worker got a connection; the story cannot go on.[/]")
            self.steps.append(StepResult(number=0, title="start", status="failed", detail=""))
            return
        self.view.say("Every worker holds an open process connection: the room sees process 1.")
        await self.pause()
        await self.step_drop()
        await self.pause()
        await self.step_restart()
        await self.pause()
        await self.step_refusal()
        await self.pause()
        await self.step_ended()
        await self.pause()
        await self.step_name_passes()
        await self.pause()
        self.view.say("The story is over: process 1 and the rival exit and announce it.")

    async def step_drop(self) -> None:
        title = "a dropped stream"
        runner = self.venue.runner
        if runner is None:
            self.step(1, title, "skipped", "Cutting a stream needs the embedded room.")
            return
        entry = self.target(0)
        before = entry.holder.connection_id or ""
        self.view.say(
            f"Step 1: the network drops {entry.name}'s stream. The holder waits 1 s, reopens."
        )
        for stream in runner.room.process_streams(entry.session.session_id):
            stream.close("dropped")
        cut_at = trio.current_time()
        if await self.connected(entry, other_than={entry.session.session_id: before}):
            took = trio.current_time() - cut_at
            self.step(1, title, "ok", f"{entry.name} reopened {took:.1f} s after the drop.")
        else:
            self.step(1, title, "failed", f"{entry.name} did not reopen.")

    async def step_restart(self) -> None:
        title = "a room restart"
        runner = self.venue.runner
        if runner is None:
            self.step(2, title, "skipped", "Restarting needs the embedded room.")
            return
        held = [e for e in self.cast.tracked if e.running]
        before = {e.session.session_id: e.holder.connection_id or "" for e in held}
        self.view.say("Step 2: the room restarts. Its streams close silently; holders see a drop.")
        await runner.stop()
        self.view.say(
            "Step 2: the room is down. It comes back on the same port, same store, and counts"
            " the connections it had as dropped: each holder reconnects, as after any drop."
        )
        await runner.start()
        restarted_at = trio.current_time()
        if await self.connected(*held, other_than=before):
            took = trio.current_time() - restarted_at
            self.step(
                2, title, "ok", f"All {len(held)} holders came back {took:.1f} s after the restart."
            )
        else:
            self.step(2, title, "failed", "Not every holder came back.")

    async def step_refusal(self) -> None:
        title = "a refusal"
        entry = self.target(1)
        rival = self.cast.processes[RIVAL]
        self.view.say(
            f"Step 3: another process re-registers {entry.name} (same instance, with the "
            "predecessor proof). The room rotates the token."
        )
        session, worker_id = await self.cast.register(
            rival, entry.name, worker_id=entry.worker_id, replacing=entry.session
        )
        taken = self.cast.hold(rival, session, worker_id)

        def refused_and_stopped() -> bool:
            return entry.holder.status is HolderStatus.STOPPED

        stopped = await self.until(refused_and_stopped)
        refusals = entry.holder.statistics().attempts[Outcome.REFUSED]
        if stopped and refusals and await self.connected(taken):
            self.step(
                3,
                title,
                "ok",
                f"Process 1's next attempt for {entry.name} was refused; the token is no "
                "longer ours, so its holder stopped. The rival holds it now.",
            )
        else:
            self.step(3, title, "failed", f"Process 1's holder of {entry.name} did not stop.")

    async def step_ended(self) -> None:
        title = "a session ended by the room"
        entry = self.target(2)
        owner = self.cast.processes[entry.process]
        runner = self.venue.runner
        if runner is not None:
            self.view.say(f"Step 4: the room ends {entry.name}'s session.")
            runner.room.end_session(entry.session.session_id, reason="room_admin")
        else:
            self.view.say(
                f"Step 4: {entry.name}'s session is ended through the room's disconnect "
                "route (another room: no room internals)."
            )
            await owner.client.call(
                "POST",
                owner.client.session_url(entry.session, "/disconnect"),
                json={
                    "agent_session_id": entry.session.session_id,
                    "agent_session_token": entry.session.session_token,
                },
                session=entry.session,
            )

        def ended() -> bool:
            return entry.holder.status is HolderStatus.ENDED

        if await self.until(ended):
            self.step(
                4, title, "ok", f"{entry.name}'s holder saw `event: ended` and stopped for good."
            )
        else:
            self.step(4, title, "failed", f"{entry.name}'s holder did not see the end.")

    async def step_name_passes(self) -> None:
        title = "a name passing"
        cast = self.cast
        p1 = cast.processes[PROCESS_1]
        self.view.say(f"Step 5: process 2 starts and holds a worker named {PASSED_NAME!r}.")
        p2 = await cast.start_process(PROCESS_2)
        session, worker_id = await cast.register(p2, PASSED_NAME)
        first = cast.hold(p2, session, worker_id)
        if not await self.connected(first):
            self.step(5, title, "failed", f"Process 2 could not hold {PASSED_NAME!r}.")
            return
        await self.pause()
        session, worker_id = await cast.register(p1, PASSED_NAME)
        self.codename = session.display_name
        cast.hold(p1, session, worker_id)
        self.view.say(
            f"Step 5: a new worker asks for {PASSED_NAME!r} while process 2 lives: "
            f"it gets the codename {self.codename!r}."
        )
        await self.pause()
        self.view.say(
            "Step 5: process 2 exits; its manager announces the exit within the deadline."
        )
        await cast.stop_process(p2)
        session, worker_id = await cast.register(p1, PASSED_NAME)
        self.passed_name = session.display_name
        latest = cast.hold(p1, session, worker_id)
        await self.connected(latest)
        if self.passed_name == PASSED_NAME and self.codename != PASSED_NAME:
            self.step(
                5,
                title,
                "ok",
                f"After process 2 announced its exit, the next worker asking for "
                f"{PASSED_NAME!r} got {self.passed_name!r}.",
            )
        else:
            self.step(
                5,
                title,
                "failed",
                f"Expected a codename then {PASSED_NAME!r}; got {self.codename!r} then "
                f"{self.passed_name!r}.",
            )


async def run_demo(
    options: DemoOptions,
    *,
    console: Console | None = None,
    interrupt: trio.Event | None = None,
    on_step: Callable[[StepResult], object] | None = None,
) -> DemoReport:
    """Play the demo's story to its end (or until ``interrupt`` is set).

    Args:
        options: what to play, and where.
        console: where to write (default: a new rich Console on stdout).
        interrupt: setting it stops the story; every exit is then announced.
        on_step: called with each finished step, as it finishes.

    Returns:
        What happened, step by step and session by session.

    Raises:
        LetAgentsError: the room (``--api-url``) refused or could not be reached.

    Cancellation:
        Cancelled from outside, every process still announces its exits
        (shielded, within each manager's exit deadline) before the
        cancellation goes on; the summary is then not printed.
    """
    t0 = trio.current_time()
    console = console or Console()
    async with open_venue(options) as venue:
        story = Story(options, venue, console, on_step=on_step, t0=t0)
        return await story.play(interrupt)
