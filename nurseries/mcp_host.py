"""An MCP host that runs the letagents MCP server in-process, under its own trio loop.

For MCP host authors: you need not spawn a subprocess to use the letagents
tools. Build the server with :func:`letagents_trio.mcp_server.create_server`
and connect the SDK's in-memory client to it; the server's lifespan (and with
it the connection manager that holds the worker's process connection) lives
exactly as long as the client's ``async with`` block. Leaving the block is the
host "closing stdin": the server stops taking calls, closes the held stream and
announces the worker's exit, all within the 1.5 s exit deadline.

SIGTERM (systemd, ``docker stop``, ``kill``) leaves the block the same way:
the host opens a signal receiver around its own scope, as any trio program
does (the library installs no handler), and cancelling the scope is closing
stdin, so the exit is still announced.

To stay self-contained the room is a :class:`letagents_trio.testing.FakeRoom`,
the reference room served in-process (no sockets). Run it:
``python nurseries/mcp_host.py``; it prints a short transcript and exits 0.
With ``--hold`` it keeps the session until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from mcp import Client
from mcp_types import TextContent

from letagents_trio.mcp_server import ServerConfig, create_server
from letagents_trio.testing import open_fake_room

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from letagents_trio import RoomClient
    from letagents_trio.testing import FakeRoom

ROOM = "room_shared"
NAME = "Juniper"


async def call(host: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tool as a host does, and read its compact JSON result."""
    result = await host.call_tool(tool, arguments)
    (block,) = result.content
    assert isinstance(block, TextContent)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {block.text}")
    value: dict[str, Any] = json.loads(block.text)
    return value


async def cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        print(f"{signal.Signals(signum).name}: stopping", flush=True)
        scope.cancel(reason="SIGTERM")


async def main(hold: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_fake_room() as room:
            config = ServerConfig(
                api_url=room.api_url,
                token=room.owner_token,
                state_path=Path(tmp) / "mcp-state.json",
                chat_storage_settings_path=Path(tmp) / "chat-storage.json",
            )
            server = create_server(config, transport=room.transport)
            # Someone else in the room speaks through this client. (Opened first and
            # closed last: it shares the FakeRoom's transport with the server.)
            other = room.client()
            async with other, Client(server, mode="legacy") as host:
                # Your own scope: SIGTERM cancels it, and the block below is left as
                # after the transcript (the default action would kill the process at
                # once, announcing nothing).
                with (
                    trio.CancelScope() as yours,
                    trio.open_signal_receiver(signal.SIGTERM) as signals,
                ):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(cancel_on_signal, signals, yours)
                        with trio.fail_after(20):
                            await transcript(host, room, other)
                        if hold:  # --hold: until Ctrl-C or SIGTERM
                            print("host: holding the session until stopped", flush=True)
                            await trio.sleep_forever()
                        nursery.cancel_scope.cancel(reason="the transcript is over")
                print("host: closing the session (like closing the server's stdin)")
            for exit_ in room.exits:
                recorded = "recorded" if exit_.recorded else "not recorded"
                print(f"room: exit announced for {NAME}'s session ({recorded})")


async def transcript(host: Client, room: FakeRoom, other: RoomClient) -> None:
    """List the tools, register a worker, and wait for a message another worker sends."""
    tools = sorted(tool.name for tool in (await host.list_tools()).tools)
    print(f"host: the server offers {', '.join(tools)}")
    registered = await call(
        host,
        "register_agent_session",
        {"room_id": ROOM, "registration_key": "this-chat", "display_name": NAME},
    )
    worker_id = registered["worker_id"]
    name = registered["agent_session"]["display_name"]
    print(f"host: registered {name} in {ROOM} (keeps worker_id for later calls)")

    # A second worker, registered straight through the room API.
    cedar = await room.add_worker(ROOM, "Cedar")
    async with trio.open_nursery() as nursery:
        received: list[dict[str, Any]] = []

        async def wait() -> None:
            received.append(
                await call(
                    host,
                    "wait_for_messages",
                    {"worker_id": worker_id, "after_message_id": "0"},
                )
            )

        nursery.start_soon(wait)
        await room.wait_until(lambda: room.room.statistics().open_polls == 1)
        print(f"host: {name} is waiting for messages")
        await other.call(
            "POST",
            f"/rooms/{ROOM}/messages",
            json={"text": "Hello Juniper, the build is green."},
            session=cedar,
        )
    for message in received[0]["messages"]:
        print(f"host: {name} received from {message['sender']}: {message['text']!r}")


if __name__ == "__main__":
    trio.run(main, "--hold" in sys.argv[1:])
