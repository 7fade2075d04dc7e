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
    from ._lanes import Answer

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
        origin, target = split_url(url)
        try:
            data = request_bytes(origin, target, method, headers, body)
        except h11.LocalProtocolError:
            if sent is not None:
                sent()
            # h11's message would quote the field, and fields hold credentials.
            raise HTTPFailure("LocalProtocolError") from None
        pool = self._pools.get(origin)
        if pool is None:
            if self._closed:
                if sent is not None:
                    sent()
                raise HTTPFailure("the stack is closed")
            pool = self._pools[origin] = PipelinedPool(self.opener, origin)
        return await pool.exchange(data, max_body=max_body, sent=sent)

    async def aclose(self) -> None:
        """Close the exits' connections; exits waiting and later ones fail.

        Cancellation:
            Closes even when cancelled.
        """
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.aclose()
