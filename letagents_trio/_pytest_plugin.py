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

import importlib
from collections.abc import AsyncIterator
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from ._extras import EXTRA_MODULES, missing_extra_text

if TYPE_CHECKING:
    from .testing import FakeRoom


@pytest.fixture
def _letagents_testing_kit() -> ModuleType:
    """:mod:`letagents_trio.testing`, or the test fails with one line naming the extra.

    A plain fixture that ``fake_room`` asks for: it runs before pytest-trio's
    nursery, so the line is the test's whole error, not a leaf of an
    exception group.
    """
    for module in sorted(EXTRA_MODULES["testing"]):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != module:
                raise  # installed, but broken: its own traceback says how
            missing = module
            break
    else:
        return importlib.import_module("letagents_trio.testing")
    # Outside the handler, so pytest shows the line alone, without the import's chain.
    pytest.fail(missing_extra_text("the fake_room fixture", "testing", missing), pytrace=False)


@pytest.fixture
async def fake_room(_letagents_testing_kit: ModuleType) -> AsyncIterator[FakeRoom]:
    """A fresh :class:`~letagents_trio.testing.FakeRoom` for one test.

    A trio fixture: it needs pytest-trio (``trio_mode = true``, or
    ``@pytest.mark.trio`` on the test). Pair it with pytest-trio's
    ``autojump_clock`` fixture for exact virtual time.
    """
    async with _letagents_testing_kit.open_fake_room() as room:
        yield room
