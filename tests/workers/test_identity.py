"""Tests of host ids, registration liveness and the runtime and IDE labels."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import trio

from letagents_trio._errors import StateUnavailable
from letagents_trio.workers._identity import (
    PROCESS_INSTANCE_ID,
    MachineFacts,
    detect_ide_label,
    detect_runtime_label,
    local_host_id,
    node_arch,
    node_platform,
    process_host_id,
    registration_liveness,
)
from letagents_trio.workers._state import LocalStateStore

HOST_ID = "host_" + "0123456789abcdef" * 2
FACTS = MachineFacts(hostname="vm", username="ada", platform="linux", arch="x64")


@pytest.fixture
def store(tmp_path: Path) -> LocalStateStore:
    return LocalStateStore(tmp_path / "state.json")


async def test_local_host_id_is_created_once(store: LocalStateStore) -> None:
    first = await local_host_id(store)
    assert re.fullmatch(r"host_[0-9a-f]{32}", first)
    assert await local_host_id(store) == first
    assert await local_host_id(LocalStateStore(store.path)) == first
    assert json.loads(store.path.read_bytes()) == {"local_host_id": first}


@pytest.mark.parametrize("blank", ["", "   "])
async def test_blank_local_host_id_is_replaced(store: LocalStateStore, blank: str) -> None:
    store.path.write_text(json.dumps({"local_host_id": blank, "other": 1}))
    created = await local_host_id(store)
    assert created.startswith("host_")
    assert json.loads(store.path.read_bytes()) == {"local_host_id": created, "other": 1}


async def test_existing_local_host_id_is_reused_without_writing(store: LocalStateStore) -> None:
    raw = json.dumps({"local_host_id": "host_from_node"}).encode()
    store.path.write_bytes(raw)
    assert await local_host_id(store) == "host_from_node"
    assert store.path.read_bytes() == raw


@pytest.mark.parametrize("raw", [b"{", json.dumps({"local_host_id": 7}).encode()])
async def test_damaged_local_host_id_is_refused(store: LocalStateStore, raw: bytes) -> None:
    store.path.write_bytes(raw)
    with pytest.raises(StateUnavailable):
        await local_host_id(store)
    assert store.path.read_bytes() == raw


async def test_concurrent_first_calls_agree(store: LocalStateStore) -> None:
    ids: list[str] = []

    async def one() -> None:
        ids.append(await local_host_id(store))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(one)
    assert len(set(ids)) == 1


def test_process_host_id_for_known_facts() -> None:
    expected = hashlib.sha256(f"{HOST_ID}\nvm\nada\nlinux\nx64".encode()).hexdigest()[:32]
    value = process_host_id(HOST_ID, facts=FACTS)
    assert value == "phost_" + expected
    assert re.fullmatch(r"phost_[0-9a-f]{32}", value)
    # Every fact is part of the value.
    for other in (
        MachineFacts(hostname="vm2", username="ada", platform="linux", arch="x64"),
        MachineFacts(hostname="vm", username="", platform="linux", arch="x64"),
        MachineFacts(hostname="vm", username="ada", platform="darwin", arch="x64"),
        MachineFacts(hostname="vm", username="ada", platform="linux", arch="arm64"),
    ):
        assert process_host_id(HOST_ID, facts=other) != value
    assert process_host_id("host_other", facts=FACTS) != value


def test_process_host_id_of_this_machine_is_stable() -> None:
    value = process_host_id(HOST_ID)
    assert re.fullmatch(r"phost_[0-9a-f]{32}", value)
    assert process_host_id(HOST_ID) == value


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_process_host_id_matches_node() -> None:
    """The Node client on this machine computes the same process_host_id."""
    script = (
        "const os = require('os'); const crypto = require('crypto');"
        "let user = ''; try { user = os.userInfo().username; } catch {}"
        f"const parts = [{json.dumps(HOST_ID)}, os.hostname(), user, process.platform,"
        " process.arch];"
        "const hash = crypto.createHash('sha256').update(parts.join('\\n')).digest('hex');"
        "console.log(JSON.stringify({id: 'phost_' + hash.slice(0, 32), parts}));"
    )
    node = shutil.which("node")
    assert node is not None
    with trio.fail_after(30):
        done = await trio.run_process([node, "-e", script], capture_stdout=True)
    answer = json.loads(done.stdout)
    facts = MachineFacts.current()
    assert [HOST_ID, facts.hostname, facts.username, facts.platform, facts.arch] == answer["parts"]
    assert process_host_id(HOST_ID) == answer["id"]


@pytest.mark.parametrize(
    ("sys_platform", "expected"),
    [
        ("linux", "linux"),
        ("darwin", "darwin"),
        ("win32", "win32"),
        ("cygwin", "cygwin"),
        ("freebsd14", "freebsd"),
        ("openbsd7", "openbsd"),
        ("sunos5", "sunos"),
        ("aix", "aix"),
        ("android", "android"),
        ("plan9", "plan"),
    ],
)
def test_node_platform_names(sys_platform: str, expected: str) -> None:
    assert node_platform(sys_platform) == expected


@pytest.mark.parametrize(
    ("machine", "is_64bit", "expected"),
    [
        ("x86_64", True, "x64"),
        ("AMD64", True, "x64"),
        ("x86_64", False, "ia32"),
        ("i686", False, "ia32"),
        ("aarch64", True, "arm64"),
        ("arm64", True, "arm64"),
        ("aarch64", False, "arm"),
        ("armv7l", False, "arm"),
        ("ppc64le", True, "ppc64"),
        ("s390x", True, "s390x"),
        ("riscv64", True, "riscv64"),
        ("loongarch64", True, "loong64"),
        ("sparc64", True, "sparc64"),
    ],
)
def test_node_arch_names(machine: str, is_64bit: bool, expected: str) -> None:
    assert node_arch(machine, is_64bit=is_64bit) == expected


@pytest.mark.parametrize(
    ("runtime", "capability"),
    [
        ("codex", "codex_app_server_runtime_stream"),
        ("Codex", "codex_app_server_runtime_stream"),
        ("claude-code", "session_activity"),
        ("python", "session_activity"),
    ],
)
def test_registration_liveness(runtime: str, capability: str) -> None:
    liveness = registration_liveness(HOST_ID, runtime, instance_id="inst-1", facts=FACTS)
    assert liveness == {
        "host_id": HOST_ID,
        "host_kind": "linux",
        "host_label": None,
        "liveness_capability": capability,
        "tool_bridge_id": f"{HOST_ID}:{runtime.lower()}:inst-1",
    }


def test_registration_liveness_on_macos_and_defaults() -> None:
    mac = MachineFacts(hostname="m", username="u", platform="darwin", arch="arm64")
    assert registration_liveness(HOST_ID, "codex", facts=mac)["host_kind"] == "macos"
    liveness = registration_liveness(HOST_ID, "python")
    assert liveness["tool_bridge_id"] == f"{HOST_ID}:python:{PROCESS_INSTANCE_ID}"
    assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", PROCESS_INSTANCE_ID)


def test_runtime_label() -> None:
    assert detect_runtime_label({}) == "python"
    assert detect_runtime_label({"LETAGENTS_RUNTIME": "  "}) == "python"
    assert detect_runtime_label({"LETAGENTS_RUNTIME": " codex "}) == "codex"


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        (None, "Agent"),
        ("", "Agent"),
        ("opencode", "OpenCode"),
        ("CLAUDE-CODE", "Claude Code"),
        ("open-model", "Open Model"),
        ("windsurf", "Windsurf"),
    ],
)
def test_ide_label(raw: str | None, label: str) -> None:
    env = {} if raw is None else {"LETAGENTS_IDE": raw}
    assert detect_ide_label(env) == label
