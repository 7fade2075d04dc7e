"""``letagents-trio demo``: the process connection's story, told on a real room.

The demo is a small play with real actors: the reference room served by
hypercorn on a free loopback port (or another room, ``--api-url``), real HTTP,
trio's real clock. Each "process" of the story is one :class:`RoomClient` and
one connection manager, run as a task of the demo's process nursery; the
holders are the library's own, untouched. The demo only steers the room and
watches the managers' timelines (:meth:`ConnectionManager.subscribe`).

The package, one concern a module:

- ``_story.py``: the story (a drop, a room restart, a refusal, a session the
  room ends, a name passing on once its process announced its exit) and the
  shutdown that ends it, as the orchestration of what happens;
  :func:`run_demo`.
- ``_processes.py``: supervision of the room server (embedded and
  restartable, or another room) and of the client "processes", the demo's
  record of tokens and every session held.
- ``_view.py``: the rich live view, the event lines and the summary, pure
  functions of the demo's state, and the :class:`Narrator` that shows them.
- ``_values.py``: the options and the report (frozen values).
- ``_cli.py``: the command line: options, signals, exit status (:func:`main`).

This package is a command-line program, not library code: it writes to the
terminal through a rich :class:`~rich.console.Console` and leaves logging
configuration alone.
"""

from __future__ import annotations

from ._cli import build_parser as build_parser
from ._cli import main as main
from ._story import run_demo as run_demo
from ._values import DemoOptions as DemoOptions
from ._values import DemoReport as DemoReport
from ._values import SessionSummary as SessionSummary
from ._values import StepResult as StepResult

__all__ = [
    "DemoOptions",
    "DemoReport",
    "SessionSummary",
    "StepResult",
    "build_parser",
    "main",
    "run_demo",
]
