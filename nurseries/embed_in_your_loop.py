"""Embedding letagents-trio in a program that owns its trio loop, against a running room.

For embedders: you call ``trio.run`` and own the nursery and the cancel scope.
The connection manager is one task of your nursery; worker handles register a
worker and hold its process connection on that manager; cancelling your scope
closes every stream and announces every exit before the cancellation completes.
SIGTERM (systemd, ``docker stop``, ``kill``) cancels your scope too: the library
installs no signal handler, your program does, around its own scope.
It imports the core and the host layer only: no extra is needed.

Start a room, then run this with its address and an owner token::

    letagents-trio room --memory --port 0    # prints its URL and a dev owner token
    LETAGENTS_API_URL=<its URL> LETAGENTS_TOKEN=<the token> python embed_in_your_loop.py

With ``--hold`` it goes on holding the worker until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from letagents_trio import HolderStatus, LetAgentsError, RoomClient, serve_connection_manager
from letagents_trio.workers import LocalStateStore, WorkerHandles

ROOM = "room_embedded"


async def cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        print(f"{signal.Signals(signum).name}: stopping")
        scope.cancel(reason="SIGTERM")


async def main(api_url: str, owner_token: str | None, state_path: Path, hold: bool = False) -> None:
    store = LocalStateStore(state_path)
    async with RoomClient(api_url, owner_token=owner_token, state=store) as client:
        # Your own scope, around the nursery: cancelling it reaches the manager's task.
        # SIGTERM cancels it as your own code does (the default action would kill
        # the process at once, announcing nothing).
        with trio.CancelScope() as yours, trio.open_signal_receiver(signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_on_signal, signals, yours)
                # nursery.start passes positional arguments only: the state store is the second.
                manager = await nursery.start(serve_connection_manager, client, store)
                handles = WorkerHandles(client=client, state=store, manager=manager)
                registered = await handles.register(
                    room_id=ROOM, registration_key="embedded-chat-1", display_name="Juniper"
                )
                session = registered.session
                # Given a manager, register already holds the session: hold() returns that holder.
                holder = manager.hold(session)
                assert holder is manager.holders[session.session_id]
                with trio.fail_after(10):
                    await holder.wait_status(HolderStatus.OPEN)
                print(f"{session.display_name} is held in {ROOM}: {holder.status.value}")

                async with handles.acting_as(worker_id=registered.worker_id) as worker:
                    sent = await client.call(
                        "POST", f"/rooms/{ROOM}/messages", json={"text": "hello"}, session=worker
                    )
                print(f"{session.display_name} said: {sent['text']}")

                if hold:  # --hold: until Ctrl-C or SIGTERM
                    print("holding until stopped", flush=True)
                    await trio.sleep_forever()
                yours.cancel()  # your program decides to stop
        for exit in manager.exit_report or ():
            outcome = "recorded" if exit.recorded else f"not recorded ({exit.error})"
            print(f"stopped: the exit of {session.display_name} was {outcome}")


if __name__ == "__main__":
    # A state file of its own, so a run never touches your ~/.letagents/mcp-state.json.
    with tempfile.TemporaryDirectory() as home:
        try:
            trio.run(
                main,
                os.environ.get("LETAGENTS_API_URL", "http://localhost:3001"),
                os.environ.get("LETAGENTS_TOKEN"),
                Path(home) / "state.json",
                "--hold" in sys.argv[1:],
            )
        except* LetAgentsError as failed:
            # The room refused or did not answer: its message says why and what
            # to do, which a traceback of nested exception groups would bury.
            for error in failed.exceptions:
                print(f"error: {error}", file=sys.stderr)
            sys.exit(1)
