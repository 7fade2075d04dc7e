"""The lean path as a :class:`~letagents_trio._http.Stack`: streams and exits over an opener.

A stream (``GET …/process``, or its WebSocket upgrade) is one request on a
connection of its own (:func:`~._request.start_request`). Exits go through a
:class:`~._pool.PipelinedPool` per origin: pipelined over a few kept-alive
connections, each written as soon as it is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, final

import h11
import trio

from ._pool import PipelinedPool
from ._request import (
    HTTP1Response,
    HTTPFailure,
    Opener,
    Origin,
    request_bytes,
    split_url,
    start_request,
)

if TYPE_CHECKING:
    from ._lanes import Answer, Settled

__all__ = ["LeanStack"]


@final
class LeanStack:
    """The lean HTTP/1.1 path over ``opener`` (see :mod:`letagents_trio._http`).

    Args:
        opener: where every connection comes from.
    """

    def __init__(self, opener: Opener) -> None:
        self.opener = opener
        # The exits' kept-alive connections, per origin, made on the first exit.
        self._pools: dict[Origin, PipelinedPool] = {}
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
        sent: Callable[[], object] | None = None,
    ) -> Answer:
        """Send a request that may be sent twice, pipelined on a kept-alive connection.

        ``sent``: see :meth:`PipelinedPool.exchange <._pool.PipelinedPool.exchange>`.

        Returns:
            Its whole answer.

        Cancellation:
            A checkpoint; cancelled, its connection is closed.
        """
        try:
            data, pool = self._prepare(method, *split_url(url), headers, body)
        except HTTPFailure:
            if sent is not None:
                sent()
            raise
        return await pool.exchange(data, max_body=max_body, sent=sent)

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
        """Hand over a request that may be sent twice, with no task waiting for its answer.

        See :meth:`PipelinedPool.send_nowait <._pool.PipelinedPool.send_nowait>`;
        :meth:`deliver` does the connections' work.

        Returns:
            Whether it was handed over (False: nothing was sent, and
            :meth:`exchange` would fail it).
        """
        try:
            data, pool = self._prepare(method, origin, target, headers, body)
            pool.send_nowait(data, max_body=max_body, settled=settled, sent=sent)
        except HTTPFailure:
            return False
        return True

    async def deliver(self) -> None:
        """Do the exits' connections' work until every request handed over is settled.

        Cancellation:
            A checkpoint; cancelled, the requests not settled are given up
            (see :meth:`PipelinedPool.deliver <._pool.PipelinedPool.deliver>`).
        """
        pools = list(self._pools.values())
        if len(pools) == 1:
            await pools[0].deliver()
            return
        async with trio.open_nursery() as nursery:
            for pool in pools:
                nursery.start_soon(pool.deliver)

    def _prepare(
        self,
        method: str,
        origin: Origin,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> tuple[bytes, PipelinedPool]:
        """The request's bytes, and the pool of its origin (made on its first request).

        Raises:
            HTTPFailure: the request cannot be written, or the stack is closed.
        """
        try:
            data = request_bytes(origin, target, method, headers, body)
        except h11.LocalProtocolError:
            # h11's message would quote the field, and fields hold credentials.
            raise HTTPFailure("LocalProtocolError") from None
        pool = self._pools.get(origin)
        if pool is None:
            if self._closed:
                raise HTTPFailure("the stack is closed")
            pool = self._pools[origin] = PipelinedPool(self.opener, origin)
        return data, pool

    async def aclose(self) -> None:
        """Close the exits' connections; exits waiting and later ones fail.

        Cancellation:
            Closes even when cancelled.
        """
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.aclose()
