"""The pytest plugin behind the ``pytest11`` entry point: the ``fake_room`` fixture.

pytest loads this module in every run wherever letagents-trio is installed,
also where the ``[testing]`` extra (the reference room's hypercorn,
pytest-trio) is not. So it imports nothing but pytest when loaded: the fixture
imports :mod:`letagents_trio.testing` only when a test asks for it, and a test
that does without the extra fails with one line saying what to install,
instead of every pytest run on the machine failing at start-up.

It lives beside the core, not in ``letagents_trio/testing/``, because
importing any module of that package runs the package's ``__init__``, which
imports the room.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .testing import FakeRoom

# The top-level modules the [testing] extra brings that letagents_trio.testing
# imports; any other missing module is a bug and keeps its traceback.
TESTING_EXTRA_MODULES = frozenset({"hypercorn"})

MISSING_EXTRA_TEXT = (
    "the fake_room fixture needs letagents-trio's [testing] extra (module {module!r} is"
    " not installed): pip install 'letagents-trio[testing]'"
)


@pytest.fixture
async def fake_room() -> AsyncIterator[FakeRoom]:
    """A fresh :class:`~letagents_trio.testing.FakeRoom` for one test.

    A trio fixture: it needs pytest-trio (``trio_mode = true``, or
    ``@pytest.mark.trio`` on the test). Pair it with pytest-trio's
    ``autojump_clock`` fixture for exact virtual time.
    """
    try:
        from .testing import open_fake_room
    except ModuleNotFoundError as exc:
        module = (exc.name or "").partition(".")[0]
        if module not in TESTING_EXTRA_MODULES:
            raise
        pytest.fail(MISSING_EXTRA_TEXT.format(module=module), pytrace=False)
    async with open_fake_room() as room:
        yield room
