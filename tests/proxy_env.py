"""The proxy settings of the environment, cleared for a test that sets its own."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def clear_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every ``*_proxy`` variable (any case) and ``REQUEST_METHOD`` for this test.

    ``urllib.request.getproxies`` reads them, and so decides both which stack a
    :class:`~letagents_trio.RoomClient` picks and where httpx2 sends requests.
    """
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
