"""The room reads no environment: its config is handed in; the CLI reads the environment."""

from __future__ import annotations

import logging
import os
import stat
from typing import TYPE_CHECKING

import trio

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, SQLiteStore, _cli

if TYPE_CHECKING:
    from pathlib import Path

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


# --- issue 13 row 8: the database is owner-only ------------------------------------------


def test_the_database_and_its_wal_and_shm_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    """Before: room.sqlite3, -wal and -shm were 0644 under the default umask, and
    another local user read a posted message from the WAL."""
    old = os.umask(0o022)
    try:
        (tmp_path / "old.sqlite3-wal").write_bytes(b"")  # left by an older run
        os.chmod(tmp_path / "old.sqlite3-wal", 0o644)
        for name in ("room.sqlite3", "old.sqlite3"):
            store = SQLiteStore(tmp_path / name)
            try:
                store.room_ids()  # touch the database so the WAL and SHM exist
                files = sorted(tmp_path.glob(f"{name}*"))
                assert {f.name for f in files} >= {name, f"{name}-wal", f"{name}-shm"}
                for f in files:
                    assert stat.S_IMODE(f.stat().st_mode) == 0o600, f.name
            finally:
                store.close()
    finally:
        os.umask(old)
