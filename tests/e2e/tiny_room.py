"""A small room on 127.0.0.1 for the HTTP layer's e2e tests: one stream, exits, one call.

An ASGI app served by the testing kit's h11 server over real sockets, plain or
behind TLS, that records every request it gets: so a test can tell a request
that reached the room directly from one that came through a proxy
(:mod:`.tiny_proxy` records those).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
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
from letagents_trio.testing._h11_server import serve_http1

if TYPE_CHECKING:
    from collections.abc import MutableMapping
    from pathlib import Path

SESSION = AgentSession(
    session_id="wsess_e2e", session_token="e2e-secret", room_id="room_e", session_kind="worker"
)
PROCESS = "/rooms/room_e/agent-sessions/wsess_e2e/process"
MESSAGES = "/rooms/room_e/messages"


class TinyRoom:
    """The process route (an endless event stream), the exit, and a list of messages."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        self.requests.append((scope["method"], scope["path"]))
        json = [(b"content-type", b"application/json")]
        if scope["method"] == "POST":
            assert b"e2e-secret" in message["body"]
            await send({"type": "http.response.start", "status": 200, "headers": json})
            await send({"type": "http.response.body", "body": b'{"recorded":true}'})
            return
        if scope["path"] == MESSAGES:
            await send({"type": "http.response.start", "status": 200, "headers": json})
            await send({"type": "http.response.body", "body": b'{"messages":[]}'})
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        opened = b'event: open\ndata: {"connection_id":"pc_e2e"}\n\n'
        await send({"type": "http.response.body", "body": opened, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass


async def serve_tiny_room(
    app: TinyRoom, tls: ssl.SSLContext | None = None, *, task_status: trio.TaskStatus[int]
) -> None:
    """Serve ``app`` on 127.0.0.1 (TLS with ``tls``); report the port; serve until cancelled."""

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
    """A server context with a new certificate (127.0.0.1, localhost), a client context trusting it.

    The certificate is written to ``tmp_path / "cert.pem"`` (for ``SSL_CERT_FILE``).
    """
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
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
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
    """Hold :data:`SESSION` until the room names its connection, then announce the exit."""
    async with open_connection_manager(client) as manager:
        with manager.subscribe(100) as events:
            holder = manager.hold(SESSION)
            async for event in events:
                if event.kind is EventKind.CONNECTION:
                    break
        assert holder.status is HolderStatus.OPEN
        report = await manager.announce_exits()
    [announcement] = report
    return announcement.connection_id, announcement.recorded
