"""Harness pieces shared by bench_vs_node.py and bench_storm.py (not a benchmark itself).

* :func:`raise_nofile` lifts RLIMIT_NOFILE for this process and its children.
* :class:`Child` runs a subprocess that prints JSON lines, reads its CPU time and
  RSS from /proc, and reaps it through a pidfd with ``os.wait4`` (so the moment
  it is gone is an event, and its total CPU comes from the kernel's rusage).
* :class:`Room` is a fresh ``fastroom.mjs`` (the Node fake room) with its
  ``/_status`` and ``/_control``; it can be restarted on the same port.
* :func:`settled` reads a room's counters until they stop moving.
* :func:`private_file` writes a file only its owner can read (tokens go there,
  never on a command line).
* :func:`hosted_tls` makes a throwaway certificate authority and a certificate
  for 127.0.0.1 signed by it (the ``openssl`` command), so that a room can be
  served as a hosted one is (HTTPS, the API's head); :meth:`HostedTLS.trust`
  is the environment each client trusts it through.

Every wait here is bounded; every child is killed and reaped in ``finally``.
Only 127.0.0.1 is ever targeted.
"""

from __future__ import annotations

import compileall
import functools
import json
import os
import resource
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import trio

__all__ = [
    "FASTROOM",
    "HOLD_MJS",
    "HOLD_PY",
    "NODE",
    "Child",
    "HostLoad",
    "HostedTLS",
    "Room",
    "child_env",
    "client_argv",
    "hosted_tls",
    "private_file",
    "raise_nofile",
    "settled",
    "stopped_by_signals",
    "wait_quiet",
]

BENCH = Path(__file__).resolve().parent
PEER = Path(os.environ.get("LETAGENTS_PEER_DIR", "/work/shared/peer"))
FASTROOM = PEER / "fastroom.mjs"
HOLD_MJS = PEER / "node" / "hold.mjs"
HOLD_PY = BENCH / "_hold_py.py"
# Preloaded into fastroom.mjs (which listens on port 0) to listen on a chosen port.
FIXED_PORT = BENCH / "_fastroom_port.mjs"
NODE = shutil.which("node")
ROOM_ID = "bench/room"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Environment that would change what either client does.
_SCRUBBED = ("LETAGENTS_AGENT_SESSION_BEARER", "LETAGENTS_TOKEN", "LETAGENTS_API_URL")


def raise_nofile(want: int = 65536) -> int:
    """Raise the open-file limit (inherited by children); return the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft
    for limits in ((want, max(hard, want)), (min(want, hard), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@asynccontextmanager
async def stopped_by_signals() -> AsyncIterator[trio.CancelScope]:
    """A scope that SIGTERM, SIGINT or SIGHUP cancel, so that every ``finally``
    kills and reaps its child (they run in sessions of their own, so a signal to
    this harness does not reach them)."""

    async def watch(scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                print(f"{name}: stopping, killing children", file=sys.stderr, flush=True)
                scope.cancel()
                return

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, scope)
            yield scope
            nursery.cancel_scope.cancel()


def _host_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (/proc/stat)."""
    first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    ticks = [int(x) for x in first[1:9]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / CLOCK_TICKS, sum(ticks) / CLOCK_TICKS


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class HostLoad:
    """CPU the rest of the machine used since this was made: the host's busy time
    minus this harness's own and the measured processes' (given to :meth:`foreign`).

    On 2 cores another test run on the machine skews every figure; rows where
    this is large say so.
    """

    def __init__(self) -> None:
        self._busy, _ = _host_busy()
        self._own = _own_cpu()

    def foreign(self, *measured: float | None) -> float:
        busy, _ = _host_busy()
        spent = busy - self._busy - (_own_cpu() - self._own)
        return spent - sum(m for m in measured if m is not None)


async def wait_quiet(max_busy: float, within: float) -> float:
    """Wait, at most ``within`` s, for a 1 s stretch with the host under ``max_busy``
    (a fraction of all cores) busy; return the last fraction seen."""
    fraction = 1.0
    with trio.move_on_after(within):
        while True:
            busy0, total0 = _host_busy()
            await trio.sleep(1.0)
            busy1, total1 = _host_busy()
            fraction = (busy1 - busy0) / max(total1 - total0, 1e-9)
            if fraction < max_busy:
                return fraction
    return fraction


@functools.cache
def _byte_compiled() -> None:
    """The tree's package byte-compiled, as pip leaves it installed; once a run.

    Every Python child imports the package from this tree. Without bytecode
    (a tree just made with ``git archive``, or ``PYTHONDONTWRITEBYTECODE`` set)
    each child would compile its modules from source at start, some 25 ms
    that *all open* counts and an installed package never spends.
    """
    compileall.compile_dir(BENCH.parent / "letagents_trio", quiet=1)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    _byte_compiled()
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(extra or {})
    # The worktree's package, whatever the caller's working directory.
    paths = [str(BENCH.parent), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


# The Python clients client_argv knows.
PY_CLIENTS = ("py", "py-ws", "py-plain", "py-ws-plain", "py-freeze")


def client_argv(
    client: str,
    url: str,
    sessions: int,
    *,
    jitter: float = 0.0,
    sessions_file: Path | None = None,
) -> list[str]:
    """The command that holds ``sessions`` sessions with ``client``.

    ``node``: hold.mjs, which ends with ``process.exit`` once its exits are
    settled; ``py``: _hold_py.py, with the collector's pauses opted in (as an
    operator of thousands of sessions would), ending the same way once the
    goodbye is done, as ``letagents-trio mcp`` ends (``--exit-at-once``:
    nothing held is freed one object at a time); ``py-ws``: the same over
    the WebSocket form; ``py-plain`` and ``py-ws-plain``: without
    the collector's pauses (the library's default); ``py-freeze``:
    _hold_py.py calling gc.freeze() once every stream is open. With ``sessions_file``
    (Python clients only), the sessions a room registered, read from that 0600
    file, instead of session_1..N.
    """
    if client == "node":
        if NODE is None:
            raise RuntimeError("node is not installed")
        if sessions_file is not None:
            raise ValueError("hold.mjs holds session_1..N only")
        return [NODE, str(HOLD_MJS), "--room", ROOM_ID, "--sessions", str(sessions), "--api", url]
    argv = [sys.executable, str(HOLD_PY), "--api", url, "--jitter", str(jitter), "--exit-at-once"]
    if sessions_file is None:
        argv += ["--room", ROOM_ID, "--sessions", str(sessions)]
    else:
        argv += ["--sessions-file", str(sessions_file)]
    if client not in PY_CLIENTS:
        raise ValueError(f"unknown client {client!r}")
    if client == "py-freeze":
        argv.append("--gc-freeze")
    if client.startswith("py-ws"):
        argv += ["--transport", "websocket"]
    if not client.endswith("-plain"):
        argv.append("--pause-collector")
    return argv


@dataclass(frozen=True)
class HostedTLS:
    """A throwaway certificate authority and the room's certificate (for 127.0.0.1) it signed."""

    ca: Path
    cert: Path
    key: Path

    def trust(self, client: str) -> dict[str, str]:
        """The environment in which ``client`` trusts this authority, as its users would set it.

        Node adds ``NODE_EXTRA_CA_CERTS`` to its bundled roots; Python's
        ``ssl.create_default_context()`` (our client's) reads ``SSL_CERT_FILE``
        in place of the system's store.
        """
        name = "NODE_EXTRA_CA_CERTS" if client == "node" else "SSL_CERT_FILE"
        return {name: str(self.ca)}

    def context(self) -> ssl.SSLContext:
        """A context that trusts this authority only (the harness's own requests)."""
        return ssl.create_default_context(cafile=str(self.ca))


# What the room's certificate may be used for; valid for 127.0.0.1 only.
_ROOM_EXTENSIONS = (
    "subjectAltName=IP:127.0.0.1\n"
    "basicConstraints=CA:FALSE\n"
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=serverAuth\n"
)
# ECDSA P-256: what hosted rooms' certificates mostly are today.
_NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")


async def hosted_tls(folder: Path) -> HostedTLS:
    """Make a certificate authority and a room certificate signed by it, in ``folder``.

    Valid for two days, for ``127.0.0.1`` only; the keys are left in
    ``folder`` (a fresh temporary folder only its owner may enter). Needs the
    ``openssl`` command.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the hosted room's certificate needs the openssl command")
    tls = HostedTLS(ca=folder / "ca.pem", cert=folder / "room.pem", key=folder / "room.key")
    ca_key, request, extensions = folder / "ca.key", folder / "room.csr", folder / "room.ext"
    extensions.write_text(_ROOM_EXTENSIONS)
    days = ("-days", "2")
    ca = ["-subj", "/CN=letagents-trio bench CA", *days]
    ca += ["-addext", "basicConstraints=critical,CA:TRUE"]
    ca += ["-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    signed_by = ("-CA", tls.ca, "-CAkey", ca_key, "-set_serial", "1", "-extfile", extensions)
    steps = [
        ("req", "-x509", *_NEW_KEY, "-keyout", ca_key, "-out", tls.ca, *ca),
        ("req", *_NEW_KEY, "-keyout", tls.key, "-out", request, "-subj", "/CN=127.0.0.1"),
        ("x509", "-req", "-in", request, *signed_by, "-out", tls.cert, *days),
    ]
    for step in steps:
        with trio.fail_after(30):
            await trio.run_process(
                [openssl, *map(str, step)], capture_stdout=True, capture_stderr=True
            )
    return tls


def private_file(path: Path, text: str) -> Path:
    """Write ``text`` to a new file at ``path`` that only its owner may read (mode 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return path


async def settled(
    read: Callable[[], Awaitable[Mapping[str, Any]]],
    keys: Sequence[str],
    *,
    quiet: float = 0.3,
    within: float = 5.0,
) -> Mapping[str, Any]:
    """``read()`` once its ``keys`` stopped moving for ``quiet`` s (at most ``within`` s)."""
    status = await read()
    with trio.move_on_after(within):
        while True:
            await trio.sleep(quiet)
            again = await read()
            if all(again[k] == status[k] for k in keys):
                return again
            status = again
    return status


def _read_proc(pid: int, name: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return None


class Child:
    """A subprocess printing JSON lines; reaped by this object only (pidfd + wait4)."""

    def __init__(self, name: str, process: trio.Process) -> None:
        self.name = name
        self.process = process
        self.pid = process.pid
        self.started = time.perf_counter()
        self.events: list[dict[str, Any]] = []
        self.gone_at: float | None = None
        self.rusage: resource.struct_rusage | None = None
        self.status: int | None = None
        self._pidfd = os.pidfd_open(process.pid)
        self._buffer = b""
        self._eof = False

    @classmethod
    async def spawn(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        log: Path,
        stdin: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> Child:
        with log.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                list(argv),
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=child_env(env),
                start_new_session=True,
            )
        return cls(name, process)

    # --- JSON lines -----------------------------------------------------------------

    async def next_event(self, *names: str, within: float) -> dict[str, Any] | None:
        """The next JSON line whose ``event`` is in ``names``; None after ``within`` s or EOF."""
        with trio.move_on_after(within):
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(event, dict):
                        continue
                    event["_at"] = time.perf_counter()
                    self.events.append(event)
                    if event.get("event") in names:
                        return event
                if self._eof or self.process.stdout is None:
                    return None
                data = await self.process.stdout.receive_some(65536)
                if not data:
                    self._eof = True
                self._buffer += data
        return None

    async def send_line(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(text.encode() + b"\n")

    # --- /proc ------------------------------------------------------------------------

    def cpu_seconds(self) -> float | None:
        """utime + stime so far (all threads), from /proc/PID/stat."""
        stat = _read_proc(self.pid, "stat")
        if stat is None:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def thread_cpu_seconds(self) -> float | None:
        """CPU time of the threads running now, to the nanosecond (/proc/PID/task/*/schedstat).

        ``cpu_seconds`` counts clock ticks (10 ms here): an idle window of a
        thousand streams costs both clients 60-100 ms, so ticks alone would be
        a fifth of the figure. A thread that ends between two reads takes its
        time with it, so this is for stretches where threads live on (idle).
        """
        total = 0
        try:
            for task in Path(f"/proc/{self.pid}/task").iterdir():
                total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return total / 1e9

    def rss_bytes(self) -> int | None:
        """VmRSS now, from /proc/PID/status."""
        status = _read_proc(self.pid, "status")
        for line in (status or "").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    def total_cpu(self) -> float | None:
        """User + system CPU of the whole life, once reaped."""
        if self.rusage is None:
            return None
        return self.rusage.ru_utime + self.rusage.ru_stime

    # --- ending -------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        if self.gone_at is None:
            os.kill(self.pid, signum)

    async def wait_gone(self, within: float) -> float | None:
        """Wait at most ``within`` s for the process to be gone; when it went (perf_counter)."""
        if self.gone_at is not None:
            return self.gone_at
        with trio.move_on_after(within):
            await trio.lowlevel.wait_readable(self._pidfd)
            self.gone_at = time.perf_counter()
            # The pidfd is readable: the process has exited, so this never blocks.
            _, self.status, self.rusage = os.wait4(self.pid, os.WNOHANG)  # noqa: ASYNC222
            # Tell subprocess it was reaped (it then sets returncode and never waits).
            self.process.poll()
            os.close(self._pidfd)
        return self.gone_at

    async def kill(self) -> None:
        """SIGKILL the process (and its session) if still there, reap it; bounded."""
        if self.gone_at is None:
            for kill in (os.killpg, os.kill):
                with suppress(ProcessLookupError):
                    kill(self.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await self.wait_gone(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with trio.CancelScope(shield=True):
                    await stream.aclose()


class Room:
    """A fresh fastroom.mjs on 127.0.0.1: start, query, restart on the same port, stop.

    With ``hosted``, the room is served as a hosted letagents room is: over
    HTTPS with that certificate, the process stream with the API's head
    (``Connection: keep-alive``, ``: connected``, ``: heartbeat`` comments).
    """

    def __init__(
        self,
        child: Child,
        port: int,
        flags: list[str],
        max_seconds: int,
        hosted: HostedTLS | None = None,
    ) -> None:
        self.child = child
        self.port = port
        self.hosted = hosted
        self.url = f"{'https' if hosted else 'http'}://127.0.0.1:{port}"
        self.http = self._harness_client()
        self._flags = flags
        self._max_seconds = max_seconds
        # Rooms killed by restart(), reaped (their total_cpu() is known).
        self.retired: list[Child] = []

    @staticmethod
    async def _spawn(
        log: Path, port: int | None, flags: Sequence[str], max_seconds: int
    ) -> tuple[Child, int]:
        if NODE is None:
            raise RuntimeError("node is needed for the fake room (fastroom.mjs)")
        argv = [NODE]
        if port is not None:
            argv += ["--import", FIXED_PORT.as_uri()]
        argv += [str(FASTROOM), "--max-seconds", str(max_seconds), *flags]
        env = {"FASTROOM_FIXED_PORT": str(port)} if port is not None else None
        child = await Child.spawn("room", argv, log=log, env=env)
        listening = await child.next_event("listening", within=15)
        if listening is None:
            await child.kill()
            raise RuntimeError(f"fastroom did not start; see {log}")
        return child, int(listening["port"])

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        log: Path,
        *,
        keepalive_ms: int,
        mode: str = "served",
        exit_delay_ms: int = 0,
        max_seconds: int = 900,
        hosted: HostedTLS | None = None,
    ) -> AsyncIterator[Room]:
        flags = ["--keepalive-ms", str(keepalive_ms), "--mode", mode]
        flags += ["--exit-delay-ms", str(exit_delay_ms)]
        if hosted is not None:
            flags += ["--as-api", "--tls-cert", str(hosted.cert), "--tls-key", str(hosted.key)]
        child, port = await cls._spawn(log, None, flags, max_seconds)
        room = cls(child, port, flags, max_seconds, hosted)
        try:
            yield room
        finally:
            with trio.CancelScope(shield=True):
                await room.child.kill()
                await room.http.aclose()

    async def restart(self, log: Path, *, down: float = 0.0) -> tuple[float, float]:
        """SIGKILL the room, wait ``down`` s, start it again on the same port.

        Returns (killed_at, listening_at) on the perf_counter clock.
        """
        await self.child.kill()
        self.retired.append(self.child)
        killed = self.child.gone_at or time.perf_counter()
        await self.http.aclose()
        await trio.sleep(down)
        self.child, port = await self._spawn(log, self.port, self._flags, self._max_seconds)
        assert port == self.port, (port, self.port)
        self.http = self._harness_client()
        return killed, time.perf_counter()

    def _harness_client(self) -> httpx2.AsyncClient:
        """The harness's own client for ``/_status`` and ``/_control``."""
        if self.hosted is None:
            return httpx2.AsyncClient(timeout=10.0)
        return httpx2.AsyncClient(timeout=10.0, verify=self.hosted.context())

    async def status(self) -> dict[str, Any]:
        response = await self.http.get(f"{self.url}/_status")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    async def wait_held(
        self,
        count: int,
        *,
        within: float,
        interval: float = 0.02,
        samples: list[tuple[float, int, int]] | None = None,
    ) -> float | None:
        """Poll /_status (harness only) until held_served >= count; when, or None after ``within``.

        ``samples`` collects (perf_counter, process_requests, held_served).
        """
        with trio.move_on_after(within):
            while True:
                status = await self.status()
                now = time.perf_counter()
                if samples is not None:
                    samples.append((now, status["process_requests"], status["held_served"]))
                if status["held_served"] >= count:
                    return now
                await trio.sleep(interval)
        return None

    async def settled_status(self) -> Mapping[str, Any]:
        """/_status once its exit counters stopped moving (:func:`settled`)."""
        return await settled(self.status, ("exits", "exits_matched", "exits_answered"))
