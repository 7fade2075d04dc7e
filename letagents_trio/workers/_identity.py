"""Who this process is, in the words the room and the Node client use.

Three ids, from most to least durable:

* ``local_host_id`` (``host_`` + 32 hex): created once in the state file, under
  its lock, and reused by every MCP server (Python or Node) that shares the
  file. It alone cannot tell machines apart: a copied or shared file carries it.
* ``process_host_id`` (``phost_`` + 32 hex): the first 32 hex digits of
  ``sha256("\\n".join([local_host_id, hostname, username, platform, arch]))``.
  ``platform`` and ``arch`` are spelled as Node's ``process.platform`` and
  ``process.arch`` spell them (``linux``, ``darwin``, ``win32``; ``x64``,
  ``arm64``), and the username is the effective user's passwd entry as Node's
  ``os.userInfo()`` reads it (``""`` when there is none), so a Python and a Node
  server on one machine report the same value. The room uses it to decide
  whether a registrant is on the same machine as a name's holder.
* :data:`PROCESS_INSTANCE_ID`: a random UUID per process, part of the
  ``tool_bridge_id`` in :func:`registration_liveness`.

Runtime and IDE labels are read from an environment mapping the caller passes
(``LETAGENTS_RUNTIME``, ``LETAGENTS_IDE``; the MCP server's
``ServerConfig.from_env`` is the one reader of the process environment); the
IDE label is normalised by :func:`letagents_trio.workers._names.normalize_ide_label`
(PROTOCOL §5.4's map).

Local identities (no account signed in) are owned by :func:`local_owner_slug`,
the user name reduced to what a canonical key segment may hold.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import platform as _platform
import re
import socket
import sys
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._errors import StateUnavailable
from ._names import normalize_ide_label
from ._stateparts import STATE_UNAVAILABLE_MESSAGE

if TYPE_CHECKING:
    from ._state import LocalStateStore

__all__ = [
    "DEFAULT_RUNTIME_LABEL",
    "IDE_ENV",
    "PROCESS_INSTANCE_ID",
    "RUNTIME_ENV",
    "MachineFacts",
    "detect_ide_label",
    "detect_runtime_label",
    "local_host_id",
    "local_owner_slug",
    "node_arch",
    "node_platform",
    "process_host_id",
    "registration_liveness",
]

# One per process, like the Node client's AGENT_INSTANCE_UUID: a restarted
# server is a new tool bridge even on the same host.
PROCESS_INSTANCE_ID: Final = str(uuid.uuid4())
# Names the agent runtime (``codex``, ``claude-code``, ...) for the room.
RUNTIME_ENV: Final = "LETAGENTS_RUNTIME"
# Names the IDE or agent host shown in actor labels.
IDE_ENV: Final = "LETAGENTS_IDE"
# Without LETAGENTS_RUNTIME we can only say what runs the server: Python.
DEFAULT_RUNTIME_LABEL: Final = "python"
# The runtime whose sessions the room watches through Codex's app server.
_CODEX_RUNTIME: Final = "codex"
_HOST_ID_PREFIX: Final = "host_"
_PROCESS_HOST_ID_PREFIX: Final = "phost_"
# phost_ ids carry this many hex digits of the sha256.
_PROCESS_HOST_ID_HEX: Final = 32
# A local owner slug keeps only what a key segment may hold.
_SLUG_DROP: Final = re.compile(r"[^a-z0-9-]+")
# Used when the user name gives nothing usable.
_DEFAULT_LOCAL_SLUG: Final = "local"

# sys.platform prefixes and the process.platform name Node gives the same OS.
_NODE_PLATFORMS: Final = (
    ("linux", "linux"),
    ("darwin", "darwin"),
    ("win32", "win32"),
    ("cygwin", "cygwin"),
    ("msys", "cygwin"),
    ("freebsd", "freebsd"),
    ("openbsd", "openbsd"),
    ("netbsd", "netbsd"),
    ("sunos", "sunos"),
    ("aix", "aix"),
    ("android", "android"),
    ("haiku", "haiku"),
)
# platform.machine() values (lowercased) and Node's process.arch for 64-bit builds.
_NODE_ARCHES: Final[Mapping[str, str]] = {
    "x86_64": "x64",
    "amd64": "x64",
    "x64": "x64",
    "i386": "ia32",
    "i486": "ia32",
    "i586": "ia32",
    "i686": "ia32",
    "x86": "ia32",
    "aarch64": "arm64",
    "aarch64_be": "arm64",
    "arm64": "arm64",
    "ppc64": "ppc64",
    "ppc64le": "ppc64",
    "ppc": "ppc",
    "powerpc": "ppc",
    "s390x": "s390x",
    "s390": "s390",
    "riscv64": "riscv64",
    "loongarch64": "loong64",
    "mips": "mips",
    "mips64": "mips64",
}
# Node names the arch of its own binary: a 32-bit interpreter on a 64-bit
# kernel is ia32 / arm, not x64 / arm64.
_NODE_32BIT: Final[Mapping[str, str]] = {"x64": "ia32", "arm64": "arm"}


def node_platform(sys_platform: str = sys.platform) -> str:
    """Node's ``process.platform`` name for a ``sys.platform`` value."""
    for prefix, name in _NODE_PLATFORMS:
        if sys_platform.startswith(prefix):
            return name
    return sys_platform.rstrip("0123456789")


def node_arch(machine: str | None = None, *, is_64bit: bool | None = None) -> str:
    """Node's ``process.arch`` name for a ``platform.machine()`` value.

    Args:
        machine: the machine name; ``None`` means ``platform.machine()``.
        is_64bit: whether the interpreter is a 64-bit build; ``None`` means this one.
    """
    raw = (_platform.machine() if machine is None else machine).lower()
    wide = sys.maxsize > 2**32 if is_64bit is None else is_64bit
    # armv6l, armv7l, armv8l... are all Node's "arm".
    arch = "arm" if raw.startswith("arm") and raw != "arm64" else _NODE_ARCHES.get(raw, raw)
    if arch.startswith("mips") and sys.byteorder == "little":
        arch = "mipsel" if arch == "mips" else "mips64el"
    return arch if wide else _NODE_32BIT.get(arch, arch)


def _username() -> str:
    try:
        if sys.platform == "win32":
            return os.getlogin()
        import pwd  # POSIX only

        return pwd.getpwuid(os.geteuid()).pw_name
    except (KeyError, OSError):
        return ""  # no passwd entry for this user: Node gives up the same way


@final
@attrs.frozen(kw_only=True)
class MachineFacts:
    """What the machine says of itself, in Node's spelling.

    Attributes:
        hostname: ``socket.gethostname()`` (Node: ``os.hostname()``).
        username: the effective user's name, ``""`` if unknown
            (Node: ``os.userInfo().username``).
        platform: Node's ``process.platform`` name.
        arch: Node's ``process.arch`` name.
    """

    hostname: str
    username: str
    platform: str
    arch: str

    @classmethod
    def current(cls) -> MachineFacts:
        """The facts of the machine this process runs on."""
        return cls(
            hostname=socket.gethostname(),
            username=_username(),
            platform=node_platform(),
            arch=node_arch(),
        )


def _valid_host_id(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


async def local_host_id(store: LocalStateStore) -> str:
    """This machine's stored host id, created under the lock if absent or blank.

    Raises:
        StateUnavailable: the state file is damaged, or its ``local_host_id`` is
            not a string (it is left as it is).
        StateLockTimeout, StateError: as :meth:`LocalStateStore.update`.

    Cancellation:
        As :meth:`LocalStateStore.update`: the id is either stored or not.
    """
    snapshot = store.read()
    current = snapshot.data.get("local_host_id")
    if snapshot.complete and _valid_host_id(current):
        await trio.lowlevel.checkpoint()
        return str(current)

    def ensure(state: dict[str, Any]) -> str:
        existing = state.get("local_host_id")
        if _valid_host_id(existing):
            return str(existing)
        if existing is not None and not isinstance(existing, str):
            # A wrong-typed value is damage to report, not to overwrite.
            error = StateUnavailable(STATE_UNAVAILABLE_MESSAGE)
            error.add_note("'local_host_id' in the state file is not a string")
            raise error
        created = _HOST_ID_PREFIX + uuid.uuid4().hex
        state["local_host_id"] = created
        return created

    return await store.update(ensure)


def process_host_id(local_host_id: str, *, facts: MachineFacts | None = None) -> str:
    """``phost_`` + 32 hex naming this machine (PROTOCOL §6.2).

    Args:
        local_host_id: the value of :func:`local_host_id`.
        facts: the machine's facts; ``None`` means :meth:`MachineFacts.current`.
    """
    machine = MachineFacts.current() if facts is None else facts
    parts = [local_host_id, machine.hostname, machine.username, machine.platform, machine.arch]
    digest = hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()
    return _PROCESS_HOST_ID_PREFIX + digest[:_PROCESS_HOST_ID_HEX]


def registration_liveness(
    local_host_id: str,
    runtime: str,
    *,
    instance_id: str = PROCESS_INSTANCE_ID,
    facts: MachineFacts | None = None,
) -> dict[str, str | None]:
    """The ``registration_liveness`` object of a registration (PROTOCOL §6.2).

    Args:
        local_host_id: the value of :func:`local_host_id`.
        runtime: the runtime label of the registration.
        instance_id: this process's instance UUID.
        facts: the machine's facts; ``None`` means :meth:`MachineFacts.current`.
    """
    machine = MachineFacts.current() if facts is None else facts
    runtime_key = runtime.lower()
    return {
        "host_id": local_host_id,
        "host_kind": "macos" if machine.platform == "darwin" else machine.platform,
        "host_label": None,
        "liveness_capability": (
            "codex_app_server_runtime_stream"
            if runtime_key == _CODEX_RUNTIME
            else "session_activity"
        ),
        "tool_bridge_id": f"{local_host_id}:{runtime_key}:{instance_id}",
    }


def detect_runtime_label(environ: Mapping[str, str]) -> str:
    """The runtime label: ``LETAGENTS_RUNTIME`` of ``environ`` trimmed, else ``"python"``."""
    return environ.get(RUNTIME_ENV, "").strip() or DEFAULT_RUNTIME_LABEL


def detect_ide_label(environ: Mapping[str, str]) -> str:
    """The IDE label: ``LETAGENTS_IDE`` of ``environ``, normalised (§5.4), else ``"Agent"``."""
    return normalize_ide_label(environ.get(IDE_ENV))


def local_owner_slug(name: str | None = None) -> str:
    """The owner slug of local identities: the user name, lower-cased, ``[a-z0-9-]`` only.

    Args:
        name: the name to slugify; ``None`` means the current user's.
    """
    if name is None:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry, no LOGNAME
            name = ""
    slug = _SLUG_DROP.sub("-", name.lower()).strip("-")
    return slug or _DEFAULT_LOCAL_SLUG
