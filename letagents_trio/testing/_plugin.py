"""The ``fake_room`` fixture under its former entry-point name.

The ``pytest11`` entry point now names :mod:`letagents_trio._pytest_plugin`,
which imports nothing but pytest when loaded (see there why it cannot live in
this package). An environment installed before that change still names this
module until it is reinstalled; this keeps it working meanwhile.
"""

from __future__ import annotations

from .._pytest_plugin import fake_room as fake_room

__all__ = ["fake_room"]
