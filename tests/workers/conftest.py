"""Fixtures of the worker-handle tests: the state file, fresh or seeded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .helpers import seed_state

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    """Where the state file goes; nothing written yet."""
    return tmp_path / "mcp-state.json"


@pytest.fixture
async def path(state_path: Path) -> Path:
    """The state file, seeded as upstream's tests seed it (the owner signed in)."""
    await seed_state(state_path)
    return state_path
