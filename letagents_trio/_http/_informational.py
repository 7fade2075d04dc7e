"""Informational answers counted on the httpx2 path, as the lean path counts them.

httpcore2 skips ``1xx`` heads until the final answer and counts none of them
(``_receive_response_headers`` loops on ``h11.InformationalResponse``), so a
room or proxy that sends them forever held a request until its deadline, and a
``bounded=False`` call for ever, parsing some 2,400 heads per 64 KiB read
between checkpoints. :func:`bound_informational` gives the connection pools of
a client's own transports (the default one, and the proxies httpx2 mounts from
the environment) a network backend whose streams read each answer's heads with
h11 beside httpcore2 and fail the request past :data:`MAX_INFORMATIONAL`:
every httpx2 request of a client, ordinary calls included. A ``101`` ends the
counting on its stream (what follows is the upgraded protocol), and so does a
``CONNECT`` tunnel's TLS (the answers inside it are counted by the TLS stream).

Loaded only when a client makes its httpx2 client, with httpcore2.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, final

import h11
import httpcore2

from ._request import MAX_INFORMATIONAL, TOO_MANY_INFORMATIONAL

if TYPE_CHECKING:
    import ssl

    import httpx2

__all__ = ["bound_informational"]


@final
class _HeadCounter:
    """The heads of one answer, read by h11 beside httpcore2: counts the 1xx ones.

    Its own client connection, sent a stand-in request (only the answer's heads
    are read, and the method changes nothing about them), is fed every byte the
    connection reads until the final head. Anything h11 refuses here httpcore2's
    own h11 refuses too, so the counter just stops.
    """

    def __init__(self) -> None:
        self._conn = h11.Connection(h11.CLIENT)
        self._conn.send(h11.Request(method="GET", target="/", headers=[("Host", "room")]))
        self._conn.send(h11.EndOfMessage())
        self._informational = 0

    def feed(self, data: bytes) -> int | None:
        """Read ``data``: the final head's status once it is in (0 if h11 refused what
        came), else None.

        Raises:
            httpcore2.RemoteProtocolError: past :data:`MAX_INFORMATIONAL` heads.
        """
        self._conn.receive_data(data)
        while True:
            try:
                event = self._conn.next_event()
            except h11.ProtocolError:
                return 0
            if event is h11.NEED_DATA:
                return None
            if not isinstance(event, h11.InformationalResponse) or event.status_code == 101:
                return getattr(event, "status_code", 0)
            self._informational += 1
            if self._informational > MAX_INFORMATIONAL:
                raise httpcore2.RemoteProtocolError(TOO_MANY_INFORMATIONAL)


@final
class _CountingStream(httpcore2.AsyncNetworkStream):
    """A connection whose answers' 1xx heads are counted (see :class:`_HeadCounter`).

    httpcore2 writes a whole request before it reads its answer, and one request
    at a time: the first write after an answer's final head starts the next count.

    Cancellation:
        As the wrapped stream's: counting adds no wait and no checkpoint.
    """

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        self._stream = stream
        self._counter: _HeadCounter | None = None
        self._answered = True
        self._switched = False

    async def read(
        self,
        max_bytes: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
    ) -> bytes:
        data = await self._stream.read(max_bytes, timeout)
        if self._counter is not None and (status := self._counter.feed(data)) is not None:
            # After a 101 the stream is the upgraded protocol's, not HTTP's.
            self._counter, self._answered, self._switched = None, True, status == 101
        return data

    async def write(
        self,
        buffer: bytes,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
    ) -> None:
        if self._answered and not self._switched:
            self._counter, self._answered = _HeadCounter(), False
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
    ) -> httpcore2.AsyncNetworkStream:
        # A tunnel's TLS: the answers inside it are counted by a stream of their own.
        self._switched = True
        return _CountingStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


@final
class _CountingBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend, its connections counting 1xx heads."""

    def __init__(self, backend: httpcore2.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _CountingStream(
            await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _CountingStream(
            await self._backend.connect_unix_socket(path, timeout, socket_options)
        )

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def bound_informational(client: httpx2.AsyncClient) -> None:
    """Fail every request of ``client``'s own transports past :data:`MAX_INFORMATIONAL`
    1xx heads (see the module docstring).

    httpx2 passes no network backend to the connection pools it makes, so the
    backend of each pool is replaced once the client is made: its default
    transport and the proxy transports it mounted from the environment. A
    transport the caller gave is left as it came (httpx2 then mounts none).
    """
    for transport in (client._transport, *client._mounts.values()):
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, httpcore2.AsyncNetworkBackend):
            pool._network_backend = _CountingBackend(backend)  # type: ignore[union-attr]
