"""The lean HTTP/1.1 path over real loopback sockets: TLS and proxies.

A small room (an ASGI app served by the testing kit's h11 server) listens on
127.0.0.1, plain or behind TLS with a self-signed certificate made here with
the ``cryptography`` package (skipped when it is not installed); a small
proxy in this file forwards absolute-form requests and tunnels ``CONNECT``.
Bounded by ``trio.fail_after``; the real clock.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest
import trio

from letagents_trio import (
    AgentSession,
    EventKind,
    HolderStatus,
    RoomClient,
    open_connection_manager,
)
from letagents_trio._net import NetworkOpener, Proxy
from letagents_trio.testing._h11_server import serve_http1

from .tiny_proxy import TinyProxy

if TYPE_CHECKING:
    from collections.abc import MutableMapping
    from pathlib import Path

SESSION = AgentSession(
    session_id="wsess_e2e", session_token="e2e-secret", room_id="room_e", session_kind="worker"
)


class TinyRoom:
    """Answers the process route with an endless event stream and records exits."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        self.requests.append((scope["method"], scope["path"]))
        if scope["method"] == "POST":
            assert b"e2e-secret" in message["body"]
            body = b'{"recorded":true}'
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        opened = b'event: open\ndata: {"connection_id":"pc_e2e"}\n\n'
        await send({"type": "http.response.body", "body": opened, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass


async def serve_room(
    app: TinyRoom, tls: ssl.SSLContext | None, *, task_status: trio.TaskStatus[int]
) -> None:
    async def handle(stream: trio.abc.Stream) -> None:
        if tls is not None:
            stream = trio.SSLStream(stream, tls, server_side=True)
        await serve_http1(
            stream,
            app,
            scheme="https" if tls else "http",
            server=("127.0.0.1", 0),
            client=("127.0.0.1", 0),
        )

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


def self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh certificate for 127.0.0.1, and a client context trusting it."""
    pytest.importorskip("cryptography", reason="cryptography makes the test certificate")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "letagents-trio test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


async def hold_and_exit(client: RoomClient) -> tuple[str | None, bool | None]:
    async with open_connection_manager(client) as manager:
        with manager.subscribe(100) as events:
            holder = manager.hold(SESSION)
            assert holder is not None
            async for event in events:
                if event.kind is EventKind.CONNECTION:
                    break
        assert holder.status is HolderStatus.OPEN
        report = await manager.announce_exits()
    [announcement] = report
    return announcement.connection_id, announcement.recorded


async def test_an_http_room_through_a_forwarding_proxy_uses_absolute_form() -> None:
    room, proxy = TinyRoom(), TinyProxy()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            room_port = await nursery.start(partial(serve_room, room, None))
            proxy_port = await nursery.start(proxy.serve)
            api = f"http://127.0.0.1:{room_port}"
            opener = NetworkOpener(proxies={"http": Proxy.from_url(f"127.0.0.1:{proxy_port}")})
            async with RoomClient(api, opener=opener) as client:
                assert await hold_and_exit(client) == ("pc_e2e", True)
            nursery.cancel_scope.cancel()
    path = "/rooms/room_e/agent-sessions/wsess_e2e/process"
    assert proxy.lines == [f"GET {api}{path}", f"POST {api}{path}/exit"]
    assert room.requests == [("GET", path), ("POST", path + "/exit")]


async def test_an_https_room_over_tls_with_the_given_trust(tmp_path: Path) -> None:
    server_tls, client_tls = self_signed(tmp_path)
    room = TinyRoom()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_room, room, server_tls))
            api = f"https://127.0.0.1:{port}"
            opener = NetworkOpener(ssl_context=client_tls, proxies={})
            async with RoomClient(api, opener=opener) as client:
                assert await hold_and_exit(client) == ("pc_e2e", True)
            # The system trust store does not know the test certificate.
            async with RoomClient(api, opener=NetworkOpener(proxies={})) as client:
                with pytest.raises(Exception, match="SSLCertVerificationError"):
                    await client.announce_exit(SESSION, None)
            nursery.cancel_scope.cancel()


async def test_an_https_room_through_a_proxy_is_tunnelled_with_connect(tmp_path: Path) -> None:
    server_tls, client_tls = self_signed(tmp_path)
    room, proxy = TinyRoom(), TinyProxy()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            room_port = await nursery.start(partial(serve_room, room, server_tls))
            proxy_port = await nursery.start(proxy.serve)
            opener = NetworkOpener(
                ssl_context=client_tls,
                proxies={"https": Proxy.from_url(f"http://127.0.0.1:{proxy_port}")},
            )
            async with RoomClient(f"https://127.0.0.1:{room_port}", opener=opener) as client:
                assert await hold_and_exit(client) == ("pc_e2e", True)
            nursery.cancel_scope.cancel()
    assert proxy.lines == [f"CONNECT 127.0.0.1:{room_port}"] * 2
    assert len(room.requests) == 2
