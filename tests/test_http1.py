"""The lean HTTP/1.1 path: URLs, the opener seam, upgrades, and proxy settings.

Servers here are small tasks on in-memory streams, written byte for byte, so
each test controls exactly what the client sees. Over real sockets (TLS,
proxies) see tests/e2e/test_lean_http.py.
"""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from letagents_trio import AgentSession, RoomClient, RoomUnreachable
from letagents_trio._http1 import Connected, HTTPFailure, Origin, split_url
from letagents_trio._net import NetworkOpener, Proxy, _bypassed, proxies_from_environment
from letagents_trio._sockio import Prefixed, close_now, discard_unread, read_some, send_now

from .sockets import tcp_pair

SESSION = AgentSession(session_id="wsess_1", session_token="secret-token-1", room_id="room_a")
API = "http://room.test"


class ScriptedOpener:
    """Opens in-memory streams whose far end a test serves with ``serve``."""

    def __init__(self, nursery: trio.Nursery, serve: object) -> None:
        self._nursery = nursery
        self._serve = serve
        self.origins: list[tuple[Origin, bool]] = []

    async def open_stream(self, origin: Origin, *, tunnel: bool = False) -> Connected:
        self.origins.append((origin, tunnel))
        client_end, server_end = trio.testing.memory_stream_pair()
        self._nursery.start_soon(self._serve, server_end)  # type: ignore[arg-type]
        await trio.lowlevel.checkpoint()
        return Connected(client_end)


async def read_head(stream: trio.abc.Stream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            break
        data += chunk
    return data


# --- URLs and origins ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "origin", "target"),
    [
        ("http://room.test", Origin("http", "room.test", 80), "/"),
        ("https://Room.Test/a/b?x=1", Origin("https", "room.test", 443), "/a/b?x=1"),
        ("http://127.0.0.1:8080/rooms/a%2Fb", Origin("http", "127.0.0.1", 8080), "/rooms/a%2Fb"),
        ("http://[::1]:9/p", Origin("http", "::1", 9), "/p"),
    ],
)
def test_split_url(url: str, origin: Origin, target: str) -> None:
    assert split_url(url) == (origin, target)


@pytest.mark.parametrize("url", ["ftp://x/", "/rooms/a", "http:///nohost"])
def test_split_url_refuses_what_is_not_an_absolute_http_url(url: str) -> None:
    with pytest.raises(ValueError, match="absolute http"):
        split_url(url)


def test_authority_omits_default_ports_and_brackets_ipv6() -> None:
    assert Origin("http", "a", 80).authority == "a"
    assert Origin("https", "a", 443).authority == "a"
    assert Origin("http", "a", 443).authority == "a:443"
    assert Origin("http", "::1", 8080).authority == "[::1]:8080"
    assert Origin("https", "a", 443).address == "a:443"


# --- the seam: requests, upgrades, closing ---------------------------------------------


async def test_a_101_detaches_the_raw_stream_with_bytes_read_ahead() -> None:
    seen: list[bytes] = []

    async def serve(stream: trio.abc.Stream) -> None:
        seen.append(await read_head(stream))
        await stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\nEARLY"
        )
        await stream.send_all(b"echo:" + await stream.receive_some())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            async with (
                RoomClient(API, owner_token="owner-1", opener=opener) as client,
                client.open_request(
                    "GET",
                    client.session_url(SESSION, "/process"),
                    session=SESSION,
                    headers={"Upgrade": "websocket", "Connection": "Upgrade"},
                    tunnel=True,
                ) as response,
            ):
                assert response.status == 101
                raw = response.detach()
                assert await raw.receive_some() == b"EARLY"
                await raw.send_all(b"hi")
                assert await raw.receive_some() == b"echo:hi"
    [(origin, tunnel)] = opener.origins
    assert (origin, tunnel) == (Origin("http", "room.test", 80), True)
    head = seen[0].decode()
    assert head.startswith("GET /rooms/room_a/agent-sessions/wsess_1/process HTTP/1.1\r\n")
    # The one header builder: credentials go out on the lean path too.
    assert "authorization: Bearer owner-1" in head.lower().replace("bearer", "Bearer")
    assert "x-letagents-agent-session-token: secret-token-1" in head.lower()


async def test_detach_without_a_switch_is_refused() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            async with client.open_request("GET", API + "/x") as response:
                assert response.status == 404
                with pytest.raises(RuntimeError, match="did not switch"):
                    response.detach()


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (b"", "RemoteProtocolError"),  # closed before answering
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "RemoteProtocolError"),
        (b"NOT HTTP AT ALL\r\n\r\n", "RemoteProtocolError"),
    ],
)
async def test_broken_answers_are_room_unreachable_naming_only_the_kind(
    answer: bytes, kind: str
) -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        if answer:
            await stream.send_all(answer)
        await stream.aclose()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            with pytest.raises(RoomUnreachable) as caught:
                await client.announce_exit(SESSION, "pc_1")
    assert str(caught.value).endswith(f"failed: {kind}")
    assert SESSION.session_token not in str(caught.value)
    assert isinstance(caught.value.__cause__, HTTPFailure)


async def test_an_oversized_exit_answer_is_refused() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        size = 65 * 1024
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        await stream.send_all(b" " * size)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            with pytest.raises(RoomUnreachable, match="BodyTooLarge"):
                await client.announce_exit(SESSION, "pc_1")


async def test_close_now_closes_sockets_and_memory_streams_without_a_checkpoint() -> None:
    a, b = trio.socket.socketpair()
    stream = trio.SocketStream(a)
    assert close_now(stream)
    assert stream.socket.fileno() == -1
    b.close()
    left, right = trio.testing.memory_stream_pair()
    assert close_now(left)
    assert await right.receive_some() == b""
    assert not close_now(trio.testing.MemorySendStream())  # type: ignore[arg-type]
    await trio.lowlevel.checkpoint()


def test_the_default_opener_is_the_network_and_a_transport_that_opens_is_used() -> None:
    assert isinstance(RoomClient(API)._opener, NetworkOpener)


# --- proxies from the environment ------------------------------------------------------


def test_proxies_from_environment_follow_httpx2s_names() -> None:
    proxies, no_proxy = proxies_from_environment(
        {
            "HTTP_PROXY": "http://upper:1",
            "http_proxy": "http://lower:2",  # lower case wins
            "ALL_PROXY": "proxy.example:3128",  # no scheme: http
            "NO_PROXY": "internal.example, .corp,localhost:8080",
        }
    )
    assert proxies["http"].origin == Origin("http", "lower", 2)
    assert proxies["https"].origin == Origin("http", "proxy.example", 3128)
    assert no_proxy == "internal.example, .corp,localhost:8080"


def test_unusable_proxy_urls_are_ignored() -> None:
    proxies, _ = proxies_from_environment({"HTTPS_PROXY": "socks5://x:1", "HTTP_PROXY": ""})
    assert proxies == {}


def test_proxy_credentials_become_basic_authorization_and_stay_out_of_reprs() -> None:
    proxy = Proxy.from_url("https://us%40er:p%3Ass@proxy:8443")
    assert proxy.origin == Origin("https", "proxy", 8443)
    assert proxy.authorization == "Basic dXNAZXI6cDpzcw=="
    assert "dXNA" not in repr(proxy)


@pytest.mark.parametrize(
    ("host", "no_proxy", "bypassed"),
    [
        ("api.example.com", "example.com", True),
        ("example.com", ".example.com", True),
        ("notexample.com", "example.com", False),
        ("anything", "*", True),
        ("localhost", "localhost:8080", True),
        ("::1", "[::1]", True),
        ("127.0.0.1", "127.0.0.2", False),
    ],
)
def test_no_proxy_matches_hosts_and_domains(host: str, no_proxy: str, bypassed: bool) -> None:
    assert _bypassed(host, no_proxy) is bypassed


def test_the_opener_picks_the_proxy_per_scheme_and_honours_no_proxy() -> None:
    proxy = Proxy.from_url("http://proxy:3128")
    opener = NetworkOpener(proxies={"https": proxy}, no_proxy="direct.example")
    assert opener.proxy_for(Origin("https", "room.example", 443)) is proxy
    assert opener.proxy_for(Origin("http", "room.example", 80)) is None
    assert opener.proxy_for(Origin("https", "direct.example", 443)) is None


async def test_send_now_writes_a_plain_socket_at_once_and_says_how_much() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with left, right:
        assert send_now(stream, b"exit frame") == 10
        assert send_now(Prefixed(stream, b"read ahead"), b"!") == 1
        assert await right.recv(100) == b"exit frame!"


async def test_send_now_says_0_when_the_buffer_is_full_and_raises_when_broken() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with left:
        with right:
            while send_now(stream, b"x" * 65536):
                pass
            assert send_now(stream, b"x") == 0
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            send_now(stream, b"x")
    await trio.lowlevel.checkpoint()


def test_send_now_declines_streams_it_cannot_write_synchronously() -> None:
    client_end, _server_end = trio.testing.memory_stream_pair()
    assert send_now(client_end, b"x") is None


# --- read_some: the lean read of a plain socket ------------------------------------------------


async def test_read_some_reads_a_plain_socket_and_says_when_it_ends() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with left, right, trio.fail_after(5):
        await right.send(b"news")
        with trio.testing.assert_checkpoints():  # even with bytes waiting
            assert await read_some(stream, 100) == b"news"
        await right.send(b"0123456789")
        assert await read_some(stream, 4) == b"0123"
        assert await read_some(stream, 100) == b"456789"
        right.shutdown(trio.socket.SHUT_WR)
        assert await read_some(stream, 100) == b""


async def test_read_some_gives_the_bytes_read_ahead_first() -> None:
    left, right = trio.socket.socketpair()
    with left, right, trio.fail_after(5):
        stream = Prefixed(trio.SocketStream(left), b"ahead")
        await right.send(b"after")
        assert await read_some(stream, 100) == b"ahead"
        assert await read_some(stream, 100) == b"after"


async def test_read_some_of_a_closed_socket_is_closed_resource_error() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with right, trio.fail_after(5):
        assert close_now(stream)
        with pytest.raises(trio.ClosedResourceError):
            await read_some(stream, 100)


async def test_a_socket_closed_while_read_some_waits_wakes_it() -> None:
    left, right = trio.socket.socketpair()
    stream = trio.SocketStream(left)
    with right, trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def close_once_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                assert close_now(stream)

            nursery.start_soon(close_once_waiting)
            with pytest.raises(trio.ClosedResourceError):
                await read_some(stream, 100)


async def test_read_some_of_a_reset_connection_is_broken_naming_the_reset() -> None:
    listener = trio.socket.socket()
    with listener, trio.fail_after(5):
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = trio.socket.socket()
        await client.connect(listener.getsockname())
        accepted, _ = await listener.accept()
        stream = trio.SocketStream(client)
        with client:
            # A close with a zero linger sends a reset instead of an end.
            accepted.setsockopt(
                trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            accepted.close()
            with pytest.raises(trio.BrokenResourceError) as broken:
                await read_some(stream, 100)
    assert isinstance(broken.value.__cause__, ConnectionResetError)


async def test_read_some_reads_other_streams_with_their_own_receive_some() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    with trio.fail_after(5):
        await server_end.send_all(b"in memory")
        assert await read_some(client_end, 100) == b"in memory"


async def test_read_some_reads_a_plain_socket_without_socketstreams_machinery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One wait and one read: not SocketStream.receive_some, whose per-read cost is the point."""

    async def not_this_way(  # noqa: ASYNC124 (replaces an async method)
        self: trio.SocketStream, max_bytes: int | None = None
    ) -> bytes:
        raise AssertionError("read through SocketStream.receive_some")

    monkeypatch.setattr(trio.SocketStream, "receive_some", not_this_way)
    left, right = trio.socket.socketpair()
    with left, right, trio.fail_after(5):
        await right.send(b"lean")
        assert await read_some(trio.SocketStream(left), 100) == b"lean"


# --- discard_unread: an orderly end, not a reset ----------------------------------------------


@pytest.mark.parametrize("drained", [True, False])
async def test_a_close_after_discard_unread_is_an_orderly_end(drained: bool) -> None:
    """Bytes left unread turn a close into a reset; drained, the peer reads an end."""
    async with tcp_pair() as (stream, peer):
        with trio.fail_after(5):
            await peer.send(b"heartbeat")
            await stream.send_all(b"exit")
            await trio.lowlevel.wait_readable(stream.socket)
            if drained:
                discard_unread(stream)
            assert close_now(stream)
            assert await peer.recv(100) == b"exit"  # what came first is read either way
            if drained:
                assert await peer.recv(100) == b""
            else:
                with pytest.raises(ConnectionResetError):
                    await peer.recv(100)


async def test_discard_unread_reads_at_most_its_limit_and_leaves_other_streams() -> None:
    async with tcp_pair() as (stream, peer):
        with trio.fail_after(5):
            await peer.send(b"x" * 100)
            await trio.lowlevel.wait_readable(stream.socket)
            discard_unread(stream, limit=60)
            assert await read_some(stream, 1000) == b"x" * 40
    client_end, server_end = trio.testing.memory_stream_pair()
    await server_end.send_all(b"in memory")
    discard_unread(client_end)  # not a socket: left alone
    assert await read_some(client_end, 100) == b"in memory"
