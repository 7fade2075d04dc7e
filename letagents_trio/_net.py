"""Opening streams to a room over the network: TCP, TLS and proxies, cheaply.

:class:`NetworkOpener` is the real :class:`~letagents_trio._http1.StreamOpener`.
Thousands of process streams open at once against the same origin, so every
per-connection cost that can be paid once is paid once:

* **Address resolution** is cached per ``(host, port)`` for
  :data:`RESOLVE_TTL` seconds, and a lookup already under way is shared by
  every connection that needs it (so a thousand holders starting together
  resolve once, not in a thousand threads). Addresses are then tried in
  order, one at a time: against one room there is no race to win.
* **TLS** uses one ``ssl.create_default_context()`` (the system trust store,
  hostname checks on), made on first use and shared; ``trio.SSLStream`` wraps
  the socket and the handshake is done before the stream is handed over.
* **Proxies** come from the standard environment variables, read once when
  the opener is made, as httpx2 reads them: ``HTTP_PROXY`` for ``http``
  origins, ``HTTPS_PROXY`` for ``https``, ``ALL_PROXY`` for both, any case;
  ``NO_PROXY`` lists hosts, domains (``example.com`` covers its subdomains)
  or ``*`` that are reached directly. An ``http`` origin goes through the proxy
  in absolute form (the proxy forwards each request); an ``https`` one (or any
  origin when a tunnel is asked for) through ``CONNECT``, then TLS inside the
  tunnel. Credentials in the proxy URL become ``Proxy-Authorization: Basic``.
  The proxy itself may be ``http://`` or ``https://``.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
from collections.abc import Mapping
from typing import final
from urllib.parse import unquote, urlsplit

import attrs
import h11
import trio

from ._http1 import Connected, HTTPFailure, Origin, exchange_head

__all__ = ["NetworkOpener", "Proxy", "proxies_from_environment"]

# How long a resolved address list is trusted; a room that moves is found again.
RESOLVE_TTL = 60.0
# Origins whose addresses are remembered at once; a client talks to one or two.
MAX_CACHED_ORIGINS = 64


@final
@attrs.frozen
class Proxy:
    """A proxy to reach origins through.

    Attributes:
        origin: where the proxy listens (``http`` or ``https``).
        authorization: the ``Proxy-Authorization`` value, if the URL had credentials.
    """

    origin: Origin
    authorization: str | None = attrs.field(default=None, repr=False)

    @classmethod
    def from_url(cls, url: str) -> Proxy:
        """Parse a proxy URL; a URL without a scheme is taken as ``http://``.

        Raises:
            ValueError: not an http(s) proxy URL (socks is not supported).
        """
        if "://" not in url:
            url = f"http://{url}"
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported proxy URL scheme {scheme!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return cls(Origin(scheme, parts.hostname, port), authorization)


def proxies_from_environment(
    environ: Mapping[str, str] | None = None,
) -> tuple[dict[str, Proxy], str]:
    """The proxies per origin scheme, and the ``NO_PROXY`` list, from the environment.

    Lower-case names win over upper-case ones, as in ``urllib`` and httpx2.
    A proxy URL that cannot be used is ignored.
    """
    env = os.environ if environ is None else environ

    def read(name: str) -> str:
        return (env.get(name.lower()) or env.get(name.upper()) or "").strip()

    proxies: dict[str, Proxy] = {}
    fallback = read("all_proxy")
    for scheme in ("http", "https"):
        url = read(f"{scheme}_proxy") or fallback
        if url:
            try:
                proxies[scheme] = Proxy.from_url(url)
            except ValueError:
                continue
    return proxies, read("no_proxy")


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` names ``host``: ``*``, the host, or a domain it is in."""
    host = host.lower().strip("[]")
    for entry in no_proxy.lower().split(","):
        entry = entry.strip()
        if entry.startswith("[") and "]" in entry:
            entry = entry[1 : entry.index("]")]
        elif entry.count(":") == 1:
            entry = entry.split(":")[0]  # a port is not part of the match
        entry = entry.lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return True
    return False


@final
class _Resolution:
    """One address lookup, shared by every connection that waits for it."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.addresses: list[tuple[int, tuple[object, ...]]] = []
        self.error: OSError | None = None
        self.expires = 0.0


@final
class NetworkOpener:
    """Opens TCP (and TLS, and proxied) streams to origins; see the module docstring.

    Args:
        ssl_context: the TLS context for https origins and proxies; default
            ``ssl.create_default_context()`` (the system trust store).
        proxies: proxy per origin scheme (``"http"``, ``"https"``); default
            read from the environment (:func:`proxies_from_environment`).
        no_proxy: the ``NO_PROXY`` list; read with ``proxies`` when those are.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        proxies: Mapping[str, Proxy] | None = None,
        no_proxy: str = "",
    ) -> None:
        if proxies is None:
            proxies, no_proxy = proxies_from_environment()
        self._proxies = dict(proxies)
        self._no_proxy = no_proxy
        self._ssl_context = ssl_context
        self._resolved: dict[tuple[str, int], _Resolution] = {}

    def __repr__(self) -> str:
        return f"<NetworkOpener proxies={sorted(self._proxies)}>"

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context used (made on first use when none was given)."""
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def proxy_for(self, origin: Origin) -> Proxy | None:
        """The proxy ``origin`` is reached through, or None for a direct connection."""
        proxy = self._proxies.get(origin.scheme)
        if proxy is None:
            return None
        if self._no_proxy and _bypassed(origin.host, self._no_proxy):
            return None
        return proxy

    async def open_stream(self, origin: Origin, *, tunnel: bool = False) -> Connected:
        """Connect to ``origin`` (see :class:`~letagents_trio._http1.StreamOpener`).

        Cancellation:
            A checkpoint; cancelled, the socket is closed.
        """
        proxy = self.proxy_for(origin)
        stream: trio.abc.Stream
        if proxy is None:
            stream = await self._connect(origin)
            if origin.scheme == "https":
                stream = await self._wrap_tls(stream, origin.host)
            return Connected(stream)
        stream = await self._connect(proxy.origin)
        if proxy.origin.scheme == "https":
            stream = await self._wrap_tls(stream, proxy.origin.host)
        headers = (("Proxy-Authorization", proxy.authorization),) if proxy.authorization else ()
        if origin.scheme == "http" and not tunnel:
            return Connected(stream, absolute_form=True, proxy_headers=headers)
        stream = await _connect_tunnel(stream, origin, headers)
        if origin.scheme == "https":
            stream = await self._wrap_tls(stream, origin.host)
        return Connected(stream)

    async def _connect(self, origin: Origin) -> trio.SocketStream:
        addresses = await self._addresses(origin.host, origin.port)
        error: OSError | None = None
        for family, address in addresses:
            sock = trio.socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await sock.connect(address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            return trio.SocketStream(sock)
        raise error or OSError("no address to connect to")

    async def _addresses(self, host: str, port: int) -> list[tuple[int, tuple[object, ...]]]:
        key = (host, port)
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
        if not entry.addresses:
            raise OSError(f"address lookup for {host!r} was interrupted")
        return entry.addresses

    async def _wrap_tls(
        self, stream: trio.abc.Stream, host: str
    ) -> trio.SSLStream[trio.abc.Stream]:
        tls = trio.SSLStream(stream, self.ssl_context, server_hostname=host, https_compatible=True)
        try:
            await tls.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return tls


async def _connect_tunnel(
    stream: trio.abc.Stream, origin: Origin, headers: tuple[tuple[str, str], ...]
) -> trio.abc.Stream:
    """Ask a proxy to ``CONNECT`` to ``origin``; return the stream, now a tunnel.

    Raises:
        HTTPFailure: the proxy refused (``ProxyRefused``) or broke HTTP.
    """
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="CONNECT",
        target=origin.address,
        headers=[("Host", origin.address), *headers],
    )
    try:
        head = await exchange_head(stream, conn, request, None)
        if not 200 <= head.status_code < 300:
            raise HTTPFailure("ProxyRefused")
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    data, _closed = conn.trailing_data
    if data:
        # A proxy that speaks before the client does in a fresh tunnel is broken.
        await trio.aclose_forcefully(stream)
        raise HTTPFailure("ProxyProtocolError")
    return stream
