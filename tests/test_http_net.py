"""The network opener (``letagents_trio._http._net``): Happy Eyeballs over cached addresses.

On trio's fake network: a socket factory and a hostname resolver of this
file's own, installed for one ``trio.run`` (they are run variables), so that
every connection attempt, its outcome and its timing are the test's, under
``autojump_clock`` with exact virtual times. TLS over real sockets is in
tests/e2e/test_lean_http.py.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Literal

import attrs
import pytest
import trio
import trio.testing

from letagents_trio import AgentSession, RoomClient, RoomUnreachable
from letagents_trio._http import NetworkOpener, Origin
from letagents_trio._http._net import (
    HAPPY_EYEBALLS_DELAY,
    MAX_CACHED_ORIGINS,
    RESOLVE_TTL,
    _interleaved,
)

if TYPE_CHECKING:
    from trio._socket import _GetAddrInfoEntry

PORT = 8080
ORIGIN = Origin("http", "room.example", PORT)

# What connecting to an address does: succeed or fail after a delay, never answer,
# or succeed when the network's gate opens (attempts that connect at one moment).
Outcome = tuple[float, Literal["ok", "refused"]] | Literal["black hole", "gate"]


@attrs.define(eq=False)
class FakeSocket(trio.socket.SocketType):
    """A TCP socket of the fake network: connects as the network's plan says."""

    network: FakeNetwork
    _family: socket.AddressFamily
    ip: str | None = None
    started: float | None = None
    connected: bool = False
    closed: bool = False
    options: list[tuple[int, int, int]] = attrs.field(factory=list)

    @property
    def family(self) -> socket.AddressFamily:
        return self._family

    @property
    def type(self) -> socket.SocketKind:
        return socket.SOCK_STREAM

    def setsockopt(self, *args: object) -> None:
        level, option, value = args
        assert isinstance(level, int)
        assert isinstance(option, int)
        assert isinstance(value, int)
        self.options.append((level, option, value))

    async def connect(self, address: object) -> None:
        assert isinstance(address, tuple)
        assert address[1] == PORT
        self.ip = str(address[0])
        self.started = trio.current_time()
        self.network.attempts.append(self)
        outcome = self.network.plan[self.ip]
        if outcome == "black hole":
            await trio.sleep_forever()
        if outcome == "gate":
            await self.network.gate.wait()
            self.connected = True
            return
        delay, result = outcome
        await trio.sleep(delay)
        if result == "refused":
            raise ConnectionRefusedError(111, f"{self.ip} refused")
        self.connected = True

    def close(self) -> None:
        self.closed = True


@attrs.define(eq=False)
class FakeNetwork(trio.abc.SocketFactory, trio.abc.HostnameResolver):
    """The sockets and the resolver of one test: hosts' addresses, and what each does."""

    # Each host's addresses in the order the resolver gives them.
    hosts: dict[str, list[str]] = attrs.field(factory=dict)
    # What connecting to each address does.
    plan: dict[str, Outcome] = attrs.field(factory=dict)
    # How long a lookup takes, and whether it fails.
    lookup_time: float = 0.0
    lookup_error: OSError | None = None
    lookups: list[tuple[str, float]] = attrs.field(factory=list)
    attempts: list[FakeSocket] = attrs.field(factory=list)
    gate: trio.Event = attrs.field(factory=trio.Event)

    def socket(
        self,
        family: socket.AddressFamily | int = socket.AF_INET,
        type: socket.SocketKind | int = socket.SOCK_STREAM,
        proto: int = 0,
    ) -> trio.socket.SocketType:
        assert type == socket.SOCK_STREAM
        return FakeSocket(self, socket.AddressFamily(family))

    async def getaddrinfo(
        self,
        host: bytes | None,
        port: bytes | str | int | None,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[_GetAddrInfoEntry]:
        assert host is not None
        name = host.decode()
        self.lookups.append((name, trio.current_time()))
        await trio.sleep(self.lookup_time)
        if self.lookup_error is not None:
            raise self.lookup_error
        assert port == PORT
        return [_entry(ip) for ip in self.hosts[name]]

    async def getnameinfo(  # pragma: no cover - not used
        self, sockaddr: tuple[str, int] | tuple[str, int, int, int], flags: int
    ) -> tuple[str, str]:
        raise NotImplementedError

    def timeline(self) -> list[tuple[str | None, float | None]]:
        """Each attempt: its address and when it started."""
        return [(attempt.ip, attempt.started) for attempt in self.attempts]

    def open_sockets(self) -> list[str | None]:
        return [attempt.ip for attempt in self.attempts if not attempt.closed]


def _entry(ip: str) -> _GetAddrInfoEntry:
    if ":" in ip:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, PORT, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, PORT))


@pytest.fixture
async def network() -> FakeNetwork:
    """The fake network of this test's ``trio.run`` (run variables: gone with the run)."""
    fake = FakeNetwork()
    trio.socket.set_custom_socket_factory(fake)
    trio.socket.set_custom_hostname_resolver(fake)
    await trio.lowlevel.checkpoint()
    return fake


async def connect(opener: NetworkOpener, origin: Origin = ORIGIN) -> FakeSocket:
    stream = await opener.open_stream(origin)
    assert isinstance(stream, trio.SocketStream)
    assert isinstance(stream.socket, FakeSocket)
    return stream.socket


# --- the order of attempts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("resolved", "tried"),
    [
        (["6a", "6b", "4a", "4b"], ["6a", "4a", "6b", "4b"]),
        (["4a", "6a", "6b"], ["4a", "6a", "6b"]),
        (["4a", "4b", "4c", "6a"], ["4a", "6a", "4b", "4c"]),
        (["4a", "4b"], ["4a", "4b"]),
        (["4a"], ["4a"]),
    ],
)
def test_the_first_address_of_the_other_family_is_tried_second(
    resolved: list[str], tried: list[str]
) -> None:
    families = {"4": socket.AF_INET, "6": socket.AF_INET6}
    addresses: list[tuple[int, tuple[object, ...]]] = [
        (families[name[0]], (name,)) for name in resolved
    ]
    assert [address[0] for _, address in _interleaved(addresses)] == tried


async def test_attempts_start_a_delay_apart_with_the_families_interleaved(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["2001:db8::1", "2001:db8::2", "192.0.2.1", "192.0.2.2"]
    network.plan = dict.fromkeys(network.hosts["room.example"], "black hole")
    with trio.move_on_after(10):
        await connect(NetworkOpener())
    assert network.timeline() == [
        ("2001:db8::1", 0.0),
        ("192.0.2.1", HAPPY_EYEBALLS_DELAY),
        ("2001:db8::2", 2 * HAPPY_EYEBALLS_DELAY),
        ("192.0.2.2", 3 * HAPPY_EYEBALLS_DELAY),
    ]
    assert [attempt.family for attempt in network.attempts] == [
        socket.AF_INET6,
        socket.AF_INET,
        socket.AF_INET6,
        socket.AF_INET,
    ]
    # Cancelled: every attempt's socket is closed.
    assert network.open_sockets() == []


async def test_the_delay_is_the_openers_own(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1", "192.0.2.2"]
    network.plan = {"192.0.2.1": "black hole", "192.0.2.2": (0.1, "ok")}
    won = await connect(NetworkOpener(happy_eyeballs_delay=2.0))
    assert (won.ip, trio.current_time()) == ("192.0.2.2", 2.1)
    assert network.timeline() == [("192.0.2.1", 0.0), ("192.0.2.2", 2.0)]
    assert network.open_sockets() == ["192.0.2.2"]


async def test_a_failed_attempt_starts_the_next_at_once(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
    network.plan = {
        "192.0.2.1": (0.125, "refused"),
        "192.0.2.2": (0.0, "refused"),
        "192.0.2.3": (0.0625, "ok"),
    }
    won = await connect(NetworkOpener())
    assert network.timeline() == [
        ("192.0.2.1", 0.0),
        ("192.0.2.2", 0.125),
        ("192.0.2.3", 0.125),
    ]
    assert (won.ip, trio.current_time()) == ("192.0.2.3", 0.1875)
    assert network.open_sockets() == ["192.0.2.3"]


async def test_the_first_connection_made_wins_and_the_others_are_closed(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    """The first address is slow but still first: the later attempt under way is closed."""
    network.hosts["room.example"] = ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
    network.plan = {
        "192.0.2.1": (0.4, "ok"),
        "192.0.2.2": (0.3, "ok"),
        "192.0.2.3": (0.0, "ok"),
    }
    won = await connect(NetworkOpener())
    assert (won.ip, trio.current_time()) == ("192.0.2.1", 0.4)
    # The third never started: the race ended before its turn.
    assert network.timeline() == [("192.0.2.1", 0.0), ("192.0.2.2", 0.25)]
    assert [(a.ip, a.connected, a.closed) for a in network.attempts] == [
        ("192.0.2.1", True, False),
        ("192.0.2.2", False, True),
    ]
    # The winner is a TCP stream with Nagle off.
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in won.options


async def test_attempts_that_connect_at_the_same_moment_keep_one(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1", "192.0.2.2"]
    network.plan = dict.fromkeys(network.hosts["room.example"], "gate")
    won: list[FakeSocket] = []
    async with trio.open_nursery() as nursery:

        async def one() -> None:
            won.append(await connect(NetworkOpener()))

        nursery.start_soon(one)
        await trio.sleep(1)
        network.gate.set()
    assert [a.connected for a in network.attempts] == [True, True]
    assert network.open_sockets() == [won[0].ip]


async def test_every_address_failing_is_an_oserror_naming_the_last(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1", "2001:db8::1"]
    network.plan = {"192.0.2.1": (0.1, "refused"), "2001:db8::1": (1.0, "refused")}
    with pytest.raises(OSError, match=r"^all 2 addresses failed$") as caught:
        await connect(NetworkOpener())
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)
    assert str(caught.value.__cause__) == "[Errno 111] 2001:db8::1 refused"
    assert trio.current_time() == 1.1
    assert network.open_sockets() == []


async def test_one_address_is_connected_directly_and_its_error_is_its_own(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    """No race to run: an attempt slower than the delay is simply waited for."""
    network.hosts["room.example"] = ["192.0.2.1"]
    network.plan = {"192.0.2.1": (3.0, "ok")}
    won = await connect(NetworkOpener())
    assert (won.ip, trio.current_time()) == ("192.0.2.1", 3.0)
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in won.options
    network.plan["192.0.2.1"] = (0.5, "refused")
    client = RoomClient("http://room.example:8080", opener=NetworkOpener())
    session = AgentSession(session_id="s", session_token="secret", room_id="r")
    with pytest.raises(RoomUnreachable, match=r"failed: ConnectionRefusedError$"):
        await client.announce_exit(session, None)
    assert [a.closed for a in network.attempts] == [False, True]


async def test_a_cancelled_connect_closes_its_socket(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1"]
    network.plan = {"192.0.2.1": "black hole"}
    with trio.move_on_after(5):
        await connect(NetworkOpener())
    assert [(a.ip, a.closed) for a in network.attempts] == [("192.0.2.1", True)]


# --- the address cache -------------------------------------------------------------------


async def test_concurrent_connections_share_one_lookup(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1"]
    network.plan = {"192.0.2.1": (0.0, "ok")}
    network.lookup_time = 1.0
    opener = NetworkOpener()
    won: list[FakeSocket] = []

    async def one() -> None:
        won.append(await connect(opener))

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(one)
    assert network.lookups == [("room.example", 0.0)]
    assert trio.current_time() == 1.0
    assert len(won) == 10
    assert repr(opener) == "<NetworkOpener origins=1>"


async def test_addresses_are_kept_for_the_ttl_then_looked_up_again(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1"]
    network.plan = {"192.0.2.1": (0.0, "ok"), "192.0.2.9": (0.0, "ok")}
    network.lookup_time = 1.0
    opener = NetworkOpener()
    await connect(opener)
    # Known until RESOLVE_TTL after the lookup ended, the moment included.
    await trio.sleep(RESOLVE_TTL)
    network.hosts["room.example"] = ["192.0.2.9"]
    assert (await connect(opener)).ip == "192.0.2.1"
    await trio.sleep(0.5)
    assert (await connect(opener)).ip == "192.0.2.9"
    assert network.lookups == [("room.example", 0.0), ("room.example", 1.0 + RESOLVE_TTL + 0.5)]


async def test_each_origin_has_its_own_addresses(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts = {"room.example": ["192.0.2.1"], "other.example": ["192.0.2.2"]}
    network.plan = {"192.0.2.1": (0.0, "ok"), "192.0.2.2": (0.0, "ok")}
    opener = NetworkOpener()
    assert (await connect(opener)).ip == "192.0.2.1"
    assert (await connect(opener, Origin("http", "other.example", PORT))).ip == "192.0.2.2"
    assert (await connect(opener)).ip == "192.0.2.1"
    assert [name for name, _ in network.lookups] == ["room.example", "other.example"]


async def test_a_failed_lookup_fails_every_waiter_and_is_not_remembered(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = ["192.0.2.1"]
    network.plan = {"192.0.2.1": (0.0, "ok")}
    network.lookup_time = 1.0
    network.lookup_error = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    opener = NetworkOpener()
    failures: list[BaseException] = []

    async def one() -> None:
        try:
            await connect(opener)
        except OSError as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one)
    assert [type(exc) for exc in failures] == [socket.gaierror] * 3
    assert network.lookups == [("room.example", 0.0)]
    network.lookup_error = None
    assert (await connect(opener)).ip == "192.0.2.1"
    assert network.lookups == [("room.example", 0.0), ("room.example", 1.0)]


async def test_a_lookup_that_finds_no_address_is_an_oserror(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    network.hosts["room.example"] = []
    network.lookup_time = 1.0
    with trio.fail_after(10), pytest.raises(OSError, match=r"^no address found for 'room\."):
        await connect(NetworkOpener())
    assert network.lookups == [("room.example", 0.0)]


async def test_a_lookup_cancelled_in_one_task_is_done_again_for_the_others(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    """One holder leaving mid-lookup must not fail the attempts of those waiting with it."""
    network.hosts["room.example"] = ["192.0.2.1"]
    network.plan = {"192.0.2.1": (0.0, "ok")}
    network.lookup_time = 1.0
    opener = NetworkOpener()
    won: list[FakeSocket] = []

    async def one() -> None:
        won.append(await connect(opener))

    leaving = trio.CancelScope()

    async def leaves() -> None:
        with leaving:
            await connect(opener)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leaves)  # starts the lookup
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(one)  # waits for it
        await trio.sleep(0.5)
        leaving.cancel()
    assert [socket.ip for socket in won] == ["192.0.2.1"]
    assert network.lookups == [("room.example", 0.0), ("room.example", 0.5)]
    assert trio.current_time() == 1.5


async def test_the_cache_holds_a_bounded_number_of_origins(
    autojump_clock: trio.testing.MockClock, network: FakeNetwork
) -> None:
    names = [f"room{n}.example" for n in range(MAX_CACHED_ORIGINS + 1)]
    network.hosts = {name: ["192.0.2.1"] for name in names}
    network.plan = {"192.0.2.1": (0.0, "ok")}
    opener = NetworkOpener()
    for name in names[:MAX_CACHED_ORIGINS]:
        await connect(opener, Origin("http", name, PORT))
    assert repr(opener) == f"<NetworkOpener origins={MAX_CACHED_ORIGINS}>"
    await connect(opener, Origin("http", names[-1], PORT))
    assert repr(opener) == "<NetworkOpener origins=1>"
    await connect(opener, Origin("http", names[0], PORT))
    assert len(network.lookups) == MAX_CACHED_ORIGINS + 2


def test_the_tls_context_is_the_systems_made_once_unless_one_is_given() -> None:
    opener = NetworkOpener()
    assert opener.ssl_context is opener.ssl_context
    assert opener.ssl_context.check_hostname
    import ssl

    given = ssl.create_default_context()
    assert NetworkOpener(ssl_context=given).ssl_context is given
