"""Finding, joining and making rooms through the MCP tools, and the repository's rooms.

Against the reference room in process (a FakeRoom); repositories are scratch
git repositories made with the ``git`` command. What a join remembers is
checked in the state file, where the Node client keeps it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.workers._repo_context import normalize_git_remote, repo_visibility, room_context

from .helpers import call_error, call_ok, config_for, supervised_config

if TYPE_CHECKING:
    from letagents_trio.testing import FakeRoom


def serving(fake_room: FakeRoom, tmp_path: Path, **changes: Any) -> Client:
    """An in-memory client of a server for ``fake_room`` (state files under ``tmp_path``)."""
    config = config_for(fake_room, tmp_path, **changes)
    return Client(create_server(config, transport=fake_room.transport))


def state_of(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "mcp-state.json").read_text("utf-8"))
    return data


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def scratch_repo(tmp_path: Path, remote: str | None = "git@github.com:Owner/Repo.git") -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    if remote:
        git(repo, "remote", "add", "origin", remote)
    return repo


async def test_create_join_by_code_and_what_is_remembered(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(20):
        async with serving(fake_room, tmp_path) as client:
            made = await call_ok(client, "create_room", {})
            code = made["room_id"]
            assert made["code"] == code
            assert made["room_path"] == f"/in/{code}"
            joined = await call_ok(client, "join_code", {"code": f"  {code.lower()} "})
            alias = await call_ok(client, "join_project", {"code": code})
            current = await call_ok(client, "get_current_room", {})
    assert (joined["room_id"], joined["joined_via"], joined["session_mode"]) == (
        code,
        "join_code",
        "current",
    )
    assert "register_agent_session" in joined["next_step"]
    assert alias["room_id"] == code
    assert current["connected"] is True
    assert (current["room_id"], current["code"], current["joined_via"]) == (code, code, "join_code")
    assert current["auth"] == {"source": "env", "expires_at": None, "account": None}
    state = state_of(tmp_path)
    saved = state["room_sessions"][code]
    assert list(saved) == [
        "room_id",
        "project_id",
        "code",
        "display_name",
        "git_room",
        "joined_via",
        "joined_at",
        "last_seen_at",
    ]
    assert state["current_room"] == saved
    assert saved["project_id"] == code  # the room's id, as Node keeps the project's


async def test_a_code_no_room_has_is_a_tool_error_and_writes_nothing(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(20):
        async with serving(fake_room, tmp_path) as client:
            error = await call_error(client, "join_code", {"code": "zzzz-9999"})
            blank = await call_error(client, "join_code", {"code": "  "})
            live = await call_error(client, "join_room", {"name": "x", "session_mode": "live"})
    assert "No room has the invite code ZZZZ-9999" in error
    assert blank == "Pass the invite code to join."
    assert "does not run one" in live
    assert not (tmp_path / "mcp-state.json").exists()


async def test_join_a_named_room_and_resume_it_from_another_server(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    config = config_for(fake_room, tmp_path)
    with trio.fail_after(20):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            none_saved = await call_error(client, "resume_room_session", {})
            joined = await call_ok(client, "join_room", {"name": "github.com/o/r"})
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            before = await call_ok(client, "get_current_room", {})
            status = await call_ok(client, "get_onboarding_status", {"cwd": str(tmp_path)})
            resumed = await call_ok(client, "resume_room_session", {})
            after = await call_ok(client, "get_current_room", {})
            other = await call_error(client, "resume_room_session", {"room_id": "never-joined"})
    assert none_saved == "No saved room session found."
    assert joined["room_id"] == "github.com/o/r"
    assert joined["role"] == "admin"
    assert before["connected"] is False
    assert status["next_step"] == "resume_room_session"
    assert status["saved_current_room"]["room_id"] == "github.com/o/r"
    assert resumed["rejoined_from_local_state"] is True
    assert resumed["room"]["room_id"] == "github.com/o/r"
    assert after["room_id"] == "github.com/o/r"
    assert other == "No saved room session found. (never-joined)"
    assert len(fake_room.requests_to("POST", "/rooms/github.com/o/r/join")) == 2


async def test_resume_with_a_worker_rejoins_the_workers_room(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(20):
        async with serving(fake_room, tmp_path) as client:
            await call_ok(client, "join_room", {"name": "room_a"})
            await call_ok(client, "join_room", {"name": "room_b"})
            worker = await call_ok(
                client, "register_agent_session", {"room_id": "room_a", "registration_key": "k"}
            )
            resumed = await call_ok(
                client, "resume_room_session", {"worker_id": worker["worker_id"]}
            )
    assert resumed["room"]["room_id"] == "room_a"


async def test_supervised_profiles_join_nothing(fake_room: FakeRoom, tmp_path: Path) -> None:
    config = supervised_config(fake_room, tmp_path, "supervised_mcp_polling")
    with trio.fail_after(20):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            refused = await call_error(client, "join_room", {"name": "x"})
    assert {"join_room", "join_code", "create_room", "check_repo"} <= names
    assert not names & {"start_device_auth", "resume_room_session", "get_onboarding_status"}
    assert (
        refused == "The daemon-supervised worker credential is stale or missing its exact context."
    )
    assert fake_room.requests_to("POST", "/rooms/x/join") == []


async def test_check_repo_reports_the_rooms_of_a_repository(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    repo = scratch_repo(tmp_path)
    git(repo, "checkout", "-q", "-b", "feature/x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with trio.fail_after(20):
        async with serving(fake_room, tmp_path) as client:
            inside = await call_ok(client, "check_repo", {"cwd": str(repo)})
            outside = await call_ok(client, "check_repo", {"cwd": str(elsewhere)})
            # A host no provider has: answered without asking anyone (tests stay offline).
            git(repo, "remote", "set-url", "origin", "https://example.org/o/r.git")
            visibility = await call_ok(client, "check_repo_visibility", {"cwd": str(repo)})
            no_repo = await call_error(client, "check_repo_visibility", {"cwd": str(elsewhere)})
    assert inside["repo_context_status"] == "git_repo_detected"
    assert Path(inside["git_repo_root"]) == repo.resolve()
    assert inside["derived_repo_room_from_git"] == "github.com/owner/repo"
    assert inside["git_current_branch"] == "feature/x"
    assert (
        inside["derived_branch_room_from_git"]
        == "git-room:github.com:owner/repo:branch:ZmVhdHVyZS94"
    )
    assert inside["detected_room_from_context"] == inside["derived_branch_room_from_git"]
    assert outside["repo_context_status"] == "not_inside_git_repo"
    assert outside["join_hint"].startswith("Not inside a git repo.")
    assert visibility == {
        "canonicalKey": "example.org/o/r",
        "provider": "unknown",
        "visibility": "unknown",
        "accessMode": "unknown",
        "roomType": "invite",
        "error": "Unknown git provider for host: example.org",
    }
    assert no_repo.startswith("Not in a git repository or no remote configured")


async def test_initialize_repo_writes_once_and_joins(fake_room: FakeRoom, tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path)
    sub = repo / "src"
    sub.mkdir()
    with trio.fail_after(20):
        async with serving(fake_room, tmp_path) as client:
            made = await call_ok(client, "initialize_repo", {"cwd": str(sub)})
            again = await call_error(client, "initialize_repo", {"cwd": str(sub), "room": "other"})
            checked = await call_ok(client, "check_repo", {"cwd": str(sub)})
            not_repo = await call_error(client, "initialize_repo", {"cwd": str(tmp_path)})
    config = repo / ".letagents.json"
    assert config.read_text("utf-8") == '{\n  "room": "github.com/owner/repo"\n}\n'
    assert (made["joined"], made["room_id"]) == (True, "github.com/owner/repo")
    assert ".letagents.json already exists" in again
    assert checked["configured_room_from_file"] == "github.com/owner/repo"
    assert checked["current_room_scope"] == "matches_detected_repo_context"
    assert not_repo.startswith("Not inside a git repository")
    assert state_of(tmp_path)["current_room"]["joined_via"] == "config"


@pytest.mark.parametrize(
    ("url", "room"),
    [
        ("git@github.com:BrosInCode/LetAgents.git", "github.com/brosincode/letagents"),
        ("https://github.com/BrosInCode/letagents.git", "github.com/brosincode/letagents"),
        ("https://GitHub.com/BrosInCode/letagents/", "github.com/brosincode/letagents"),
        ("ssh://git@gitlab.com/Team/Project.git", "gitlab.com/Team/Project"),
    ],
)
def test_remotes_name_rooms_as_node_names_them(url: str, room: str) -> None:
    assert normalize_git_remote(url) == room


def test_a_default_branch_keeps_the_repository_room() -> None:
    assert room_context("github.com/o/r", "main", None).active_room == "github.com/o/r"
    assert room_context("github.com/o/r", "dev", "dev").active_room_kind == "repo"
    assert room_context("gitlab.com/o/r", "feature", "main").active_room == "gitlab.com/o/r"


@pytest.mark.parametrize(
    ("key", "status", "body", "visibility"),
    [
        ("github.com/o/r", 200, b"{}", "public"),
        ("github.com/o/r", 404, b"{}", "private"),
        ("github.com/o/r", 403, b"{}", "unknown"),
        ("gitlab.com/o/r", 200, b'{"visibility": "internal"}', "private"),
        ("bitbucket.org/o/r", 200, b'{"is_private": false}', "public"),
        ("gitlab.com/o/r", 200, b" " * (257 * 1024) + b'{"visibility": "public"}', "unknown"),
    ],
)
async def test_visibility_is_the_providers_answer(
    key: str, status: int, body: bytes, visibility: str
) -> None:
    asked: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        asked.append(str(request.url))
        return httpx2.Response(status, content=body)

    result = await repo_visibility(key, transport=httpx2.MockTransport(answer))
    assert (result["visibility"], result["accessMode"]) == (visibility, visibility)
    assert result["roomType"] == ("discoverable" if visibility == "public" else "invite")
    assert len(asked) == 1
    unknown = await repo_visibility("example.org/o/r", transport=httpx2.MockTransport(answer))
    assert unknown["error"] == "Unknown git provider for host: example.org"
    assert len(asked) == 1
