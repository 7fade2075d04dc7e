"""The room reads no environment: its config is handed in; the CLI reads the environment."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, _cli

if TYPE_CHECKING:
    import pytest


def test_a_room_built_without_a_config_ignores_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LETAGENTS_POLL_MAX_MS", "5000")
    monkeypatch.setenv("LETAGENTS_LIVENESS_NOTICE_AFTER_MS", "120000")
    assert Room(store=MemoryStore()).config == RoomConfig()


def test_the_cli_hands_the_room_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LETAGENTS_POLL_MAX_MS", "5000")
    monkeypatch.setenv("LETAGENTS_LIVENESS_NOTICE_AFTER_MS", "120000")
    served: list[Room] = []

    async def serve(room: Room, host: str, port: int) -> None:
        served.append(room)
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(_cli, "_run", serve)
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # leave root logging be
    assert _cli.main(["--memory", "--owner-token", "t=dev", "--log-level", "WARNING"]) == 0
    (room,) = served
    assert (room.config.poll_max_ms, room.config.liveness_notice_after_ms) == (5000, 120000)
