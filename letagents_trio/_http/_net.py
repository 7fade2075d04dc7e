"""Opening the lean path's connections over the network: TCP and TLS, cheaply.

:class:`NetworkOpener` is the real :class:`~._request.Opener`. Thousands of
process streams open at once against the same origin, so what can be paid
once is paid once:

* **Address resolution** is cached per ``(host, port)`` for
  :data:`RESOLVE_TTL` seconds, and a lookup already under way is shared by
  every connection that needs it (a thousand holders starting together
  resolve once, not in a thousand threads); should the task that started it
  be cancelled, one of those waiting looks up anew.
* **Connecting** follows Happy Eyeballs (RFC 8305), as
  ``trio.open_tcp_stream`` does, over the cached addresses: the families are
  interleaved (the first address, then the first of the other family, then
  the rest); each attempt gets :data:`HAPPY_EYEBALLS_DELAY` before the next
  starts alongside it, or less when it fails first; the first connection
  made wins and the others are closed. ``trio.open_tcp_stream`` itself
  cannot be given addresses already resolved, only a host to look up again.
  An origin with one address (a room on loopback, most often) is connected
  directly, with no race to run.
* **TLS** uses one ``ssl.create_default_context()`` (the system trust store,
  hostname checks on), made on first use and shared; the lean path's own
  :class:`~._tls.TLSStream` wraps the socket (a held stream's read is one
  wait and every record it completes) and the handshake is done before the
  stream is handed over.
* **TLS sessions** are resumed (:mod:`._resume`): a room's session, kept
  after one full handshake, is offered to its next connections, and the
  first connection to a room goes ahead of the others opening with it.
* **At most** :data:`MAX_HANDSHAKES` **TLS handshakes are under way at
  once**, the other connections waiting their turn, connected. A handshake
  under way holds OpenSSL's passing buffers (its handshake messages, the
  buffering BIO: some 30 KiB); a thousand at once leave them as free holes
  between what the streams keep, resident for the process's life. Resumed,
  a handshake is one round trip and little work, and the turns slow a
  burst's opening by a part of what full handshakes cost it (both figures
  in ``docs/performance.md``); over a link with a round trip of ``R``
  seconds they bound the rate at ``MAX_HANDSHAKES / R`` handshakes a second.

Proxies are not this module's: a client whose environment configures one
sends the process connection through httpx2 instead (see
:func:`letagents_trio._http.choose_stack`).
"""

from __future__ import annotations

import socket
import ssl
from typing import TYPE_CHECKING, Final, final

import trio

from ._resume import TLSSessions
from ._tls import open_tls

if TYPE_CHECKING:
    from ._request import Origin

__all__ = ["HAPPY_EYEBALLS_DELAY", "MAX_HANDSHAKES", "RESOLVE_TTL", "NetworkOpener"]

# How long a resolved address list is trusted; a room that moves is found again.
RESOLVE_TTL: Final = 60.0
# Origins whose addresses are remembered at once; a client talks to one or two.
MAX_CACHED_ORIGINS: Final = 64
# How long one connection attempt runs before the next starts beside it
# (RFC 8305 section 8's recommended value, and trio's default).
HAPPY_EYEBALLS_DELAY: Final = 0.25
# TLS handshakes under way at once: few enough that their passing buffers leave no
# lasting holes in the C heap, enough to keep a burst of resumed ones going.
MAX_HANDSHAKES: Final = 128

Address = tuple[int, tuple[object, ...]]


@final
class _Resolution:
    """One address lookup, shared by every connection that waits for it."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.addresses: list[Address] = []
        self.error: OSError | None = None
        self.expires = 0.0


def _interleaved(addresses: list[Address]) -> list[Address]:
    """The first address, then the first of another family, then the rest (RFC 8305 §4)."""
    for index, (family, _) in enumerate(addresses[1:], 1):
        if family != addresses[0][0]:
            return [addresses[0], addresses[index], *addresses[1:index], *addresses[index + 1 :]]
    return addresses


async def _connect_one(family: int, address: tuple[object, ...]) -> trio.SocketStream:
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def _race(addresses: list[Address], delay: float) -> trio.SocketStream:
    """Happy Eyeballs over ``addresses``: the first connection made, the others closed.

    Raises:
        OSError: every attempt failed (the last failure, the others chained).
    """
    winner: trio.SocketStream | None = None
    failures: list[OSError] = []

    async def attempt(address: Address, failed: trio.Event, nursery: trio.Nursery) -> None:
        nonlocal winner
        try:
            stream = await _connect_one(*address)
        except OSError as exc:
            failures.append(exc)
            failed.set()
            return
        if winner is None:
            winner = stream
            nursery.cancel_scope.cancel(reason="connected")
        else:
            stream.socket.close()

    async with trio.open_nursery() as nursery:
        for address in _interleaved(addresses):
            failed = trio.Event()
            nursery.start_soon(attempt, address, failed, nursery)
            with trio.move_on_after(delay):
                await failed.wait()
    if winner is None:
        raise OSError(f"all {len(addresses)} addresses failed") from (
            failures[-1] if failures else None
        )
    return winner


@final
class NetworkOpener:
    """Opens TCP (and TLS) streams to origins; see the module docstring.

    Args:
        ssl_context: the TLS context for https origins; default
            ``ssl.create_default_context()`` (the system trust store).
        happy_eyeballs_delay: how long one attempt runs before the next
            address is tried beside it.
        max_handshakes: how many TLS handshakes may be under way at once.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        happy_eyeballs_delay: float = HAPPY_EYEBALLS_DELAY,
        max_handshakes: int = MAX_HANDSHAKES,
    ) -> None:
        self._ssl_context = ssl_context
        self._sessions: TLSSessions | None = None
        self._handshakes = trio.CapacityLimiter(max_handshakes)
        self._delay = happy_eyeballs_delay
        self._resolved: dict[tuple[str, int], _Resolution] = {}

    def __repr__(self) -> str:
        return f"<NetworkOpener origins={len(self._resolved)}>"

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context used (made on first use when none was given)."""
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    @property
    def tls_sessions(self) -> TLSSessions:
        """The TLS sessions kept for resuming, per room, under :attr:`ssl_context`."""
        if self._sessions is None:
            self._sessions = TLSSessions(self.ssl_context)
        return self._sessions

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        """Connect to ``origin`` (see :class:`~._request.Opener`).

        Cancellation:
            A checkpoint; cancelled, the socket is closed.
        """
        addresses = await self._addresses(origin.host, origin.port)
        if len(addresses) == 1:
            stream: trio.abc.Stream = await _connect_one(*addresses[0])
        else:
            stream = await _race(addresses, self._delay)
        if origin.scheme != "https":
            return stream
        try:
            sessions = self.tls_sessions.room(origin.host, origin.port)
            return await open_tls(
                stream,
                self.ssl_context,
                origin.host,
                sessions=sessions,
                handshakes=self._handshakes,
            )
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise

    async def _addresses(self, host: str, port: int) -> list[Address]:
        key = (host, port)
        while True:
            entry = self._resolved.get(key)
            now = trio.current_time()
            if entry is not None and entry.addresses and entry.expires >= now:
                # The common case: known. The connect that follows is the checkpoint.
                return entry.addresses
            if entry is None or (entry.done.is_set() and (entry.error or entry.expires < now)):
                if len(self._resolved) >= MAX_CACHED_ORIGINS:
                    self._resolved.clear()
                entry = self._resolved[key] = _Resolution()
                try:
                    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                    entry.addresses = [(info[0], info[4]) for info in infos]
                    if not entry.addresses:
                        entry.error = OSError(f"no address found for {host!r}")
                except OSError as exc:
                    entry.error = exc
                finally:
                    entry.expires = trio.current_time() + RESOLVE_TTL
                    entry.done.set()
                    if not entry.addresses and self._resolved.get(key) is entry:
                        # A failed (or cancelled) lookup is not remembered.
                        del self._resolved[key]
            else:
                await entry.done.wait()
            if entry.error is not None:
                raise entry.error
            if entry.addresses:
                return entry.addresses
            # The lookup waited for was cancelled in the task that made it (a
            # holder leaving): the others need the addresses all the same.
