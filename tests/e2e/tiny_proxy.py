"""A small HTTP proxy on 127.0.0.1 for e2e tests: absolute-form forwarding, CONNECT tunnels."""

from __future__ import annotations

import trio


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
        line, _, rest = head.partition(b"\r\n")
        method, target, version = line.decode().split(" ")
        self.lines.append(f"{method} {target}")
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = await trio.open_tcp_stream(host, int(port))
            await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            hostport, _, path = target.removeprefix("http://").partition("/")
            host, port = hostport.rsplit(":", 1)
            upstream = await trio.open_tcp_stream(host, int(port))
            await upstream.send_all(f"{method} /{path} {version}\r\n".encode() + rest)
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
