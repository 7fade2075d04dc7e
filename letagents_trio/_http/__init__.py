"""HTTP for the process connection, and the one seam that decides which stack sends it.

A room client sends two kinds of request. Ordinary API calls (registration,
messages, …) always go through httpx2. The requests a connection manager
makes by the thousand — the process stream (``GET …/process``, as SSE or as
a WebSocket upgrade) and the exit (``POST …/process/exit``) — go through a
:class:`Stack`, picked once, when the client is made, by :func:`choose_stack`:

=====================================  ==========================================
the client was given                   the process connection's requests go
=====================================  ==========================================
an ``opener``                          the lean path over that opener
an httpx2 ``transport``, no opener     httpx2, through that transport
neither, and a proxy is configured     httpx2, whose proxy rules (``NO_PROXY``
in the environment                     included) decide for every request
neither, and no proxy                  the lean path over the network
=====================================  ==========================================

So every request of one client follows one set of proxy rules, httpx2's (the
standard library's ``getproxies`` read the environment for both: a proxy
configured for no scheme is no proxy); a proxy httpx2 cannot use fails the
request loudly and is never bypassed.

**The lean path** (:class:`LeanStack`) is HTTP/1.1 with h11 over trio
streams: one connection per stream, the exits pipelined over a few
kept-alive connections per origin, each written as soon as it is asked
(:mod:`._pool`), no timeout anywhere (the holder's scope owns the answer
time and silence, the manager's shielded deadline the goodbye). An
:class:`Opener` gives it its connections: :class:`NetworkOpener` dials TCP
(Happy Eyeballs over cached addresses) and TLS; the testing kit serves an
app in memory.

**The httpx2 path** (:class:`HTTPXStack`) sends the same requests through
the client's ``httpx2.AsyncClient``; a WebSocket upgrade's raw stream is the
``network_stream`` httpx2 hands over after ``101``.

Both report a failure of the network or of the peer's HTTP as
:class:`HTTPFailure`, whose message is only a type name (never a URL or a
header).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol
from urllib.request import getproxies

from ._httpx import HTTPXStack, failure_name
from ._lanes import Answer, Settled
from ._lean import LeanStack
from ._net import NetworkOpener
from ._request import HTTP1Response, HTTPFailure, Opener, Origin, split_url
from ._sockio import (
    Prefixed,
    QuietReads,
    can_send_now,
    close_now,
    discard_unread,
    read_some,
    send_now,
    unsent_size,
)
from ._socknow import SocketNow, socket_now

if TYPE_CHECKING:
    import httpx2
    import trio

__all__ = [
    "Answer",
    "HTTP1Response",
    "HTTPFailure",
    "HTTPXStack",
    "LeanStack",
    "NetworkOpener",
    "Opener",
    "Origin",
    "Prefixed",
    "QuietReads",
    "Response",
    "Settled",
    "SocketNow",
    "Stack",
    "bound_informational",
    "can_send_now",
    "choose_stack",
    "close_now",
    "discard_unread",
    "failure_name",
    "proxy_configured",
    "read_some",
    "send_now",
    "socket_now",
    "split_url",
    "unsent_size",
]

# The environment's proxy schemes httpx2 mounts (the others, such as ftp, it ignores).
_PROXIED_SCHEMES = ("http", "https", "all")


class Response(Protocol):
    """The head of a process-connection response, and its body or raw stream to come."""

    @property
    def status(self) -> int:
        """The status code."""
        ...

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        ...

    @property
    def heard_at(self) -> float | None:
        """When the latest chunk's bytes arrived, if a quiet read found them kept; else None.

        The stream reading the response turns it into the one thing its
        holder asks (``ProcessStream.heard_at``): when bytes were last heard.
        """
        ...

    def wire_size(self, size: int) -> int:
        """What a piece of the body of ``size`` bytes, written alone, weighs on the wire.

        Its framing and its TLS record included; 0 where the stack cannot
        tell, or never keeps bytes unread (then ``keep`` is ignored).
        """
        ...

    async def next_chunk(self, *, keep: int = 0) -> bytes:
        """The next bytes of the body as they arrive; ``b""`` once it has ended.

        ``keep``: the kernel may keep up to this many bytes on the wire
        (:meth:`wire_size`) unread until more come or the reader's deadline
        draws near, where the stack can ask it to (see
        :class:`~letagents_trio._http._sockio.QuietReads`).

        Raises:
            HTTPFailure: the connection broke or the body was misframed.

        Cancellation:
            A checkpoint; cancelled, the response is no longer usable.
        """
        ...

    def detach(self) -> trio.abc.Stream:
        """The raw stream after ``101 Switching Protocols``, owned by this response.

        Raises:
            RuntimeError: the server did not switch protocols.
        """
        ...

    def close_nowait(self) -> bool:
        """Close the connection now, with no checkpoint, where it can be; whether it was."""
        ...

    async def aclose(self) -> None:
        """Close the connection at once (no TLS close_notify, nothing drained).

        Cancellation:
            Closes even when cancelled.
        """
        ...


class Stack(Protocol):
    """Sends the process connection's requests (see the module docstring)."""

    async def start(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes | None
    ) -> Response:
        """Send one request on a connection of its own; return the response, body unread.

        Raises:
            HTTPFailure: the connection or the exchange failed (nothing is left open).

        Cancellation:
            A checkpoint; cancelled, the connection is closed.
        """
        ...

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
        """Send one request that may be sent twice (an exit) and read its whole answer.

        ``sent``, when given, is called once, with no checkpoint: when the
        request is on its way to the room (handed to the kernel), or else
        when the exchange ends.

        Raises:
            HTTPFailure: it failed, or the answer's body is over ``max_body``
                (``BodyTooLarge``).

        Cancellation:
            A checkpoint; cancelled, its connection is closed.
        """
        ...

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

        ``settled(answer, failure)`` is called once, with no checkpoint, with
        its answer or its failure, from :meth:`deliver`; ``sent`` as for
        :meth:`exchange`. No checkpoint.

        Returns:
            Whether it was handed over; False when this stack cannot (nothing
            was sent: :meth:`exchange` is the way).
        """
        ...

    async def deliver(self) -> None:
        """Send the requests handed over and read their answers, until each is settled.

        Cancellation:
            A checkpoint; cancelled, those not settled are given up (their
            ``sent`` told, their ``settled`` never).
        """
        ...

    async def aclose(self) -> None:
        """Close what the stack keeps open between requests.

        Cancellation:
            Closes even when cancelled.
        """
        ...


def bound_informational(client: httpx2.AsyncClient) -> None:
    """Make ``client``'s own connections count each answer's 1xx heads, as the lean path does.

    Past ``MAX_INFORMATIONAL`` the request fails (:mod:`._informational`). That
    module is imported here, on first use, with httpcore2: a client that never
    makes an httpx2 call does not load it.
    """
    from ._informational import bound_informational as bound

    bound(client)


def proxy_configured() -> bool:
    """Whether the environment configures a proxy httpx2 would use for some URL."""
    configured = getproxies()
    return any(configured.get(scheme) for scheme in _PROXIED_SCHEMES)


def choose_stack(
    *,
    opener: Opener | None,
    transport: httpx2.AsyncBaseTransport | None,
    http_client: Callable[[], httpx2.AsyncClient],
) -> Stack:
    """The stack a client's process-connection requests go through (see the module docstring).

    Args:
        opener: the connections of the lean path, if the client was given some.
        transport: the httpx2 transport the client was given, if any.
        http_client: the client's httpx2 client, made on first use.
    """
    if opener is not None:
        return LeanStack(opener)
    if transport is not None or proxy_configured():
        return HTTPXStack(http_client)
    return LeanStack(NetworkOpener())
