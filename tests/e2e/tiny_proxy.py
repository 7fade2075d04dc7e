"""A small HTTP proxy on 127.0.0.1 for e2e tests: absolute-form forwarding, CONNECT tunnels."""

from __future__ import annotations

import trio

# Hop-by-hop fields a forwarding proxy does not pass on as they came.
_HOP_BY_HOP = (b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization")


def _origin_form(head: bytes) -> tuple[str, str, bytes]:
    """The request head as sent upstream: origin form, one request per connection.

    Returns:
        The upstream host, its port, and the head to send it.
    """
    line, *fields = head.split(b"\r\n")
    method, target, version = line.decode().split(" ")
    hostport, _, path = target.removeprefix("http://").partition("/")
    host, port = hostport.rsplit(":", 1)
    names = {field.split(b":", 1)[0].strip().lower() for field in fields}
    kept = [field for field in fields if field.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP]
    # An upgrade keeps the connection; anything else is its only request, so that
    # every request on a kept-alive client connection is seen (and recorded) here.
    kept.append(b"Connection: Upgrade" if b"upgrade" in names else b"Connection: close")
    request = f"{method} /{path} {version}".encode()
    return host, port, b"\r\n".join([request, *kept])


class TinyProxy:
    """Forwards absolute-form requests and tunnels CONNECT; records each request line."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def handle(self, client: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await client.receive_some()
            if not chunk:
                return
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        method, target, _version = head.split(b"\r\n", 1)[0].decode().split(" ")
        self.lines.append(f"{method} {target}")
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = await trio.open_tcp_stream(host, int(port))
            await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                await upstream.send_all(rest)
        else:
            host, port, upstream_head = _origin_form(head)
            upstream = await trio.open_tcp_stream(host, int(port))
            await upstream.send_all(upstream_head + b"\r\n\r\n" + rest)
        # Both ways until either side ends; the client's connection then closes.
        async with upstream, trio.open_nursery() as nursery:
            nursery.start_soon(self._pipe, client, upstream, nursery.cancel_scope)
            nursery.start_soon(self._pipe, upstream, client, nursery.cancel_scope)

    @staticmethod
    async def _pipe(
        source: trio.abc.Stream, sink: trio.abc.Stream, scope: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some():
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

    async def serve(self, *, task_status: trio.TaskStatus[int]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self.handle, listeners)
