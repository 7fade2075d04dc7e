from __future__ import annotations

import pytest


@pytest.fixture(params=["sse", "websocket"])
def both_transports(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once per transport: managers opened without a connector use this one."""
    from letagents_trio import WebSocketConnector, _manager

    transport = str(request.param)
    if transport == "websocket":
        monkeypatch.setattr(_manager, "SSEConnector", WebSocketConnector)
    return transport
