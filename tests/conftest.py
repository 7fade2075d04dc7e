from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(params=["sse", "websocket"])
def both_transports(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once per transport: managers opened without a connector use this one."""
    import attrs

    from letagents_trio import _manager, _websocket

    transport = str(request.param)

    def connector_for(client: Any, policy: Any) -> Any:
        return _websocket.connector_for(client, attrs.evolve(policy, transport=transport))

    monkeypatch.setattr(_manager, "connector_for", connector_for)
    return transport
