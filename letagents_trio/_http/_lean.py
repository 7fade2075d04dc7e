"""The lean path as a :class:`~letagents_trio._http.Stack`: streams and exits over an opener.

A stream (``GET …/process``, or its WebSocket upgrade) is one request on a
connection of its own (:func:`~._request.start_request`). Exits go through a
:class:`~._pool.KeepAlivePool` per origin: kept-alive connections, and a
goodbye's many exits pipelined over a few of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import final

import h11
import trio

from ._pool import Answer, KeepAlivePool
from ._request import (
    HTTP1Response,
    HTTPFailure,
    Opener,
    Origin,
    request_bytes,
    split_url,
    start_request,
)

__all__ = ["LeanStack", "Request"]

# One request of a batch: method, URL, header fields, body.
Request = tuple[str, str, Sequence[tuple[str, str]], bytes]


@final
class LeanStack:
    """The lean HTTP/1.1 path over ``opener`` (see :mod:`letagents_trio._http`).

    Args:
        opener: where every connection comes from.
    """

    def __init__(self, opener: Opener) -> None:
        self.opener = opener
        # The exits' kept-alive connections, per origin, made on the first exit.
        self._pools: dict[Origin, KeepAlivePool] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<LeanStack opener={self.opener!r}>"

    async def start(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes | None
    ) -> HTTP1Response:
        """Send one request on a connection of its own (see :class:`~letagents_trio._http.Stack`).

        Cancellation:
            A checkpoint; cancelled, the connection is closed.
        """
        origin, target = split_url(url)
        return await start_request(self.opener, origin, target, method, headers, body)

    async def exchange(
        self,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        max_body: int,
    ) -> Answer:
        """Send a request that may be sent twice over a kept-alive connection; read its answer.

        Cancellation:
            A checkpoint; cancelled, its connection is closed.
        """
        origin, data = _serialized((method, url, headers, body))
        return await self._pool(origin).exchange(data, max_body=max_body)

    async def exchange_many(
        self,
        requests: Sequence[Request],
        *,
        max_body: int,
        answered: Callable[[int, Answer | HTTPFailure], Awaitable[None]],
    ) -> None:
        """Send many requests that may be sent twice, pipelined over a few connections.

        See :meth:`KeepAlivePool.exchange_many <._pool.KeepAlivePool.exchange_many>`;
        a request h11 refuses to serialize fails alone, and requests to
        different origins go to each origin's pool.

        Cancellation:
            A checkpoint; cancelled, the answers not read yet are never handed over.
        """
        by_origin: dict[Origin, tuple[list[int], list[bytes]]] = {}
        for index, request in enumerate(requests):
            try:
                origin, data = _serialized(request)
            except HTTPFailure as failure:
                await answered(index, failure)
                continue
            indices, datas = by_origin.setdefault(origin, ([], []))
            indices.append(index)
            datas.append(data)
        async with trio.open_nursery() as nursery:
            for origin, (indices, datas) in by_origin.items():
                try:
                    pool = self._pool(origin)
                except HTTPFailure as failure:
                    for index in indices:
                        await answered(index, failure)
                    continue

                async def answered_at(
                    at: int, result: Answer | HTTPFailure, indices: list[int] = indices
                ) -> None:
                    await answered(indices[at], result)

                nursery.start_soon(
                    partial(
                        pool.exchange_many,
                        datas,
                        max_body=max_body,
                        answered=answered_at,
                    )
                )

    def _pool(self, origin: Origin) -> KeepAlivePool:
        pool = self._pools.get(origin)
        if pool is None:
            if self._closed:
                raise HTTPFailure("the stack is closed")
            pool = self._pools[origin] = KeepAlivePool(self.opener, origin)
        return pool

    async def aclose(self) -> None:
        """Close the exits' idle connections; later exits fail.

        Cancellation:
            Closes even when cancelled.
        """
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.aclose()


def _serialized(request: Request) -> tuple[Origin, bytes]:
    """A request's origin and bytes (h11 checks every field).

    Raises:
        HTTPFailure: a field h11 refuses (``LocalProtocolError``; h11's message
            would quote the field, and fields hold credentials).
    """
    method, url, headers, body = request
    origin, target = split_url(url)
    try:
        return origin, request_bytes(origin, target, method, headers, body)
    except h11.LocalProtocolError:
        raise HTTPFailure("LocalProtocolError") from None
