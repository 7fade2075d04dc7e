"""End-to-end tests share the state-file fixtures of the worker-handle tests."""

from __future__ import annotations

from ..workers.conftest import path as path
from ..workers.conftest import state_path as state_path
