"""pytest plugin: the ``fake_room`` fixture (registered through the ``pytest11`` entry point).

Trio fixtures need pytest-trio: enable ``trio_mode = true`` (or mark tests with
``@pytest.mark.trio``) in the project that uses it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ._fake_room import FakeRoom, open_fake_room


@pytest.fixture
async def fake_room() -> AsyncIterator[FakeRoom]:
    """A fresh :class:`~letagents_trio.testing.FakeRoom` for one test.

    Pair it with pytest-trio's ``autojump_clock`` fixture for exact virtual time.
    """
    async with open_fake_room() as room:
        yield room
