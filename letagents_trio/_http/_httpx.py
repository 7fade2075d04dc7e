"""The httpx2 path as a :class:`~letagents_trio._http.Stack`: the same requests, httpx2's rules.

Used when the client was given an httpx2 transport (which then serves every
request) or when the environment configures a proxy (whose rules, and
``NO_PROXY``'s, httpx2 applies to every request of the client alike). The
process stream is ``client.send(..., stream=True)``, read chunk by chunk as
sent (no read timeout: the holder owns silence); an exit is one request
whose answer is read whole, within a cap; a WebSocket upgrade's raw stream
is the ``network_stream`` that httpx2 hands over with a ``101`` answer,
wrapped as a trio stream.

**Informational answers.** httpcore2 counts none of the ``1xx`` heads it
skips; the client's own transports get a network backend that does
(:mod:`._informational`), and :func:`failure_name` names that failure as the
lean path does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final, final

import trio

from ._lanes import Answer, Settled
from ._request import TOO_MANY_INFORMATIONAL, HTTPFailure

if TYPE_CHECKING:
    import httpx2

    from ._request import Origin

__all__ = ["HTTPXStack", "failure_name"]

# Bytes asked for per read of an upgraded stream, as the lean path reads.
_READ_SIZE: Final = 65_536


# What a read of a stream closed (or broken) under it raises below httpx2.
_CLOSED = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def failure_name(exc: BaseException) -> str:
    """What failed, by type name, or ``TooManyInformational`` for a flood of 1xx heads."""
    if str(exc) == TOO_MANY_INFORMATIONAL:
        return TOO_MANY_INFORMATIONAL
    return type(exc).__name__


def _failure(exc: BaseException) -> HTTPFailure:
    return HTTPFailure(failure_name(exc))


@final
class _UpgradedStream(trio.abc.Stream):
    """httpx2's ``network_stream`` after ``101``, as a trio stream."""

    def __init__(self, network_stream: Any) -> None:
        self._stream = network_stream

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        import httpx2

        try:
            await self._stream.write(bytes(data))
        except (httpx2.TransportError, OSError) as exc:
            raise trio.BrokenResourceError(type(exc).__name__) from exc

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        raise trio.BrokenResourceError("an upgraded httpx2 stream cannot half-close")

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        import httpx2

        try:
            return bytes(await self._stream.read(max_bytes or _READ_SIZE))
        except (httpx2.TransportError, OSError) as exc:
            raise trio.BrokenResourceError(type(exc).__name__) from exc

    async def aclose(self) -> None:
        with suppress(Exception):
            await self._stream.aclose()


@final
class _HTTPXResponse:
    """An httpx2 response, read as the lean path's responses are."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        # httpx2's body iterator, an async generator: made on the first read,
        # closed by whoever ends it (a read that fails, or aclose between reads).
        self._chunks: AsyncGenerator[bytes, None] | None = None
        self._reading = False
        self.status: int = response.status_code
        self.headers = [(name.lower(), value) for name, value in response.headers.raw]

    def __repr__(self) -> str:
        return f"<_HTTPXResponse status={self.status}>"

    def header(self, name: str) -> str | None:
        value: str | None = self._response.headers.get(name)
        return value

    @property
    def heard_at(self) -> float | None:
        """None: httpx2's reads are never quiet."""
        return None

    def wire_size(self, size: int) -> int:
        """0: httpx2's reads are never quiet, so nothing is kept."""
        return 0

    async def next_chunk(self, *, keep: int = 0) -> bytes:
        import httpx2

        if self._chunks is None:
            self._chunks = self._response.aiter_raw()
        self._reading = True
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            return b""
        except (httpx2.HTTPError, httpx2.StreamError, *_CLOSED) as exc:
            # Closed from another task (a holder leaving) surfaces as trio's own.
            raise _failure(exc) from exc
        finally:
            self._reading = False

    def detach(self) -> trio.abc.Stream:
        stream = self._response.extensions.get("network_stream")
        if self.status != 101 or stream is None:
            raise RuntimeError(f"HTTP {self.status} did not switch protocols")
        return _UpgradedStream(stream)

    def close_nowait(self) -> bool:
        """Never: an httpx2 response closes only with a checkpoint."""
        return False

    async def aclose(self) -> None:
        # A read under way in another task fails as the response closes, and
        # that ends the iterator; between reads it is closed here.
        if self._chunks is not None and not self._reading:
            await self._chunks.aclose()
        await self._response.aclose()


@final
class HTTPXStack:
    """The process connection's requests through the client's httpx2 client.

    Args:
        http_client: the client's ``httpx2.AsyncClient``, made on first use.
    """

    def __init__(self, http_client: Callable[[], httpx2.AsyncClient]) -> None:
        self._http_client = http_client

    def __repr__(self) -> str:
        return "<HTTPXStack>"

    async def start(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes | None
    ) -> _HTTPXResponse:
        """Send one request, stream its answer (see :class:`~letagents_trio._http.Stack`).

        Cancellation:
            A checkpoint; cancelled, the request is closed.
        """
        import httpx2

        client = self._http_client()
        request = client.build_request(method, url, headers=list(headers), content=body)
        try:
            response = await client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            raise _failure(exc) from exc
        return _HTTPXResponse(response)

    async def exchange(
        self,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        max_body: int,
        sent: Callable[[], object] | None = None,
    ) -> Answer:
        """Send one request and read its whole answer (see :class:`~letagents_trio._http.Stack`).

        ``sent`` is called as the request starts: httpx2 does not tell when
        its bytes are written.

        Cancellation:
            A checkpoint; cancelled, the request is closed.
        """
        if sent is not None:
            sent()
        response = await self.start(method, url, headers, body)
        try:
            data = bytearray()
            while chunk := await response.next_chunk():
                data += chunk
                if len(data) > max_body:
                    raise HTTPFailure("BodyTooLarge")
        finally:
            await response.aclose()
        return Answer(response.status, tuple(response.headers), bytes(data))

    def send_nowait(
        self,
        method: str,
        origin: Origin,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        max_body: int,
        settled: Settled,
        sent: Callable[[], object] | None = None,
    ) -> bool:
        """Never: httpx2 sends a request only from a task awaiting it (:meth:`exchange`)."""
        return False

    async def deliver(self) -> None:
        """Nothing is ever handed over (:meth:`send_nowait`).

        Cancellation:
            A checkpoint.
        """
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Nothing of its own to close: the client closes its httpx2 client.

        Cancellation:
            A checkpoint.
        """
        await trio.lowlevel.checkpoint()
