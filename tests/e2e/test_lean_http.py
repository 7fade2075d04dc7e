"""The lean HTTP/1.1 path over real loopback sockets: TCP through the resolver, and TLS.

A small room (:mod:`.tiny_room`) listens on 127.0.0.1, plain or behind TLS
with a self-signed certificate made here with the ``cryptography`` package
(skipped when it is not installed). Proxies are the httpx2 path's
(tests/e2e/test_httpx_path.py). Bounded by ``trio.fail_after``; the real clock.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import pytest
import trio

from letagents_trio import RoomClient, RoomUnreachable
from letagents_trio._http import LeanStack, NetworkOpener

from ..proxy_env import clear_proxy_environment
from .tiny_room import (
    MESSAGES,
    PROCESS,
    SESSION,
    TinyRoom,
    hold_and_exit,
    self_signed,
    serve_tiny_room,
)

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(autouse=True)
def no_proxy_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy in the environment would send these requests through httpx2 instead."""
    clear_proxy_environment(monkeypatch)


async def test_an_http_room_by_name_through_the_resolver() -> None:
    """``localhost`` is looked up (one address or both families, raced), then connected."""
    room = TinyRoom()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_tiny_room, room))
            async with RoomClient(f"http://localhost:{port}") as client:
                assert isinstance(client._stack, LeanStack)
                assert await hold_and_exit(client) == ("pc_e2e", True)
                await client.call("GET", MESSAGES, session=SESSION)
            nursery.cancel_scope.cancel()
    assert room.requests == [("GET", PROCESS), ("POST", PROCESS + "/exit"), ("GET", MESSAGES)]


async def test_an_https_room_over_tls_with_the_given_trust(tmp_path: Path) -> None:
    server_tls, client_tls = self_signed(tmp_path)
    room = TinyRoom()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_tiny_room, room, server_tls))
            api = f"https://127.0.0.1:{port}"
            async with RoomClient(api, opener=NetworkOpener(ssl_context=client_tls)) as client:
                assert await hold_and_exit(client) == ("pc_e2e", True)
            # The system trust store does not know the test certificate: no exit is sent.
            async with RoomClient(api) as client:
                assert isinstance(client._stack, LeanStack)
                with pytest.raises(RoomUnreachable, match=r"failed: SSLCertVerificationError$"):
                    await client.announce_exit(SESSION, None)
            nursery.cancel_scope.cancel()
    assert room.requests == [("GET", PROCESS), ("POST", PROCESS + "/exit")]
