"""Owner tokens from a private file or the environment, not only the command line (issue 13 row 7).

Before, ``--owner-token TOKEN=LOGIN`` was the only way to give them, so any
local user read them from ``/proc/PID/cmdline``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
import trio

from letagents_trio.room_server import Room, _cli
from letagents_trio.room_server._auth._accounts import account_id
from letagents_trio.room_server._auth._owner_tokens import (
    OWNER_TOKENS_ENV,
    PERSON_TOKENS_ENV,
    OwnerTokensError,
    owner_tokens_from_env,
    read_owner_tokens_file,
)

from ..doc_blocks import ROOT, runnable

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
SECRET = "s3cret-owner-token"


def tokens_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "owner-tokens"
    path.write_text(text)
    path.chmod(mode)
    return path


def served_room(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> Room:
    served: list[Room] = []

    async def serve(room: Room, host: str, port: int) -> None:
        served.append(room)
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(_cli, "_run", serve)
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # leave root logging be
    assert _cli.main(["--memory", "--log-level", "WARNING", *argv]) == 0
    (room,) = served
    return room


def served_tokens(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, str]:
    return dict(served_room(monkeypatch, argv).owner_tokens)


def test_the_cli_reads_owner_tokens_from_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(OWNER_TOKENS_ENV, raising=False)
    path = tokens_file(tmp_path, f"# the room's owners\n\n{SECRET}=alice\n  other = bob  \n")
    tokens = served_tokens(monkeypatch, ["--owner-tokens-file", str(path)])
    assert tokens == {SECRET: "alice", "other": "bob"}


def test_the_cli_reads_owner_tokens_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OWNER_TOKENS_ENV, f"{SECRET}=alice,t2=bob\nt3=carol,\n")
    tokens = served_tokens(monkeypatch, ["--owner-token", "t4=dave"])
    assert tokens == {SECRET: "alice", "t2": "bob", "t3": "carol", "t4": "dave"}


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_a_tokens_file_others_can_read_or_change_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: int,
) -> None:
    path = tokens_file(tmp_path, f"{SECRET}=alice\n", mode)
    monkeypatch.setattr(_cli, "_run", lambda *_: pytest.fail("the room started"))
    with pytest.raises(SystemExit) as exited:
        _cli.main(["--memory", "--owner-tokens-file", str(path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"mode {mode:04o} lets other users read or change it" in err
    assert "must be 0600" in err
    assert SECRET not in err


def test_a_tokens_file_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tokens_file(tmp_path, f"{SECRET}=alice\n")
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(path).st_uid + 1)
    with pytest.raises(OwnerTokensError, match="not by this user") as caught:
        read_owner_tokens_file(path)
    assert SECRET not in str(caught.value)


def test_a_tokens_file_must_be_a_regular_file_and_exist(tmp_path: Path) -> None:
    with pytest.raises(OwnerTokensError, match="No such file"):
        read_owner_tokens_file(tmp_path / "missing")
    (tmp_path / "real").write_text("t=alice\n")
    (tmp_path / "real").chmod(0o600)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OwnerTokensError):  # a symlink is not followed
        read_owner_tokens_file(tmp_path / "link")
    (tmp_path / "dir").mkdir(mode=0o700)
    with pytest.raises(OwnerTokensError, match="not a regular file"):
        read_owner_tokens_file(tmp_path / "dir")


def test_bad_entries_name_their_line_never_the_token(tmp_path: Path) -> None:
    path = tokens_file(tmp_path, f"ok=alice\n# fine\n{SECRET}\n")
    with pytest.raises(OwnerTokensError, match=r"line 3: expected TOKEN=LOGIN") as caught:
        read_owner_tokens_file(path)
    assert SECRET not in str(caught.value)
    path = tokens_file(tmp_path, f"{SECRET}=a/b\n")
    with pytest.raises(OwnerTokensError, match="line 1"):
        read_owner_tokens_file(path)
    path = tokens_file(tmp_path, f"{SECRET}=alice\n{SECRET}=bob\n")
    with pytest.raises(OwnerTokensError, match="two different logins") as caught:
        read_owner_tokens_file(path)
    assert SECRET not in str(caught.value)
    with pytest.raises(OwnerTokensError, match=rf"\${OWNER_TOKENS_ENV}, entry 2") as caught:
        owner_tokens_from_env({OWNER_TOKENS_ENV: f"a=alice,{SECRET}"})
    assert SECRET not in str(caught.value)
    assert owner_tokens_from_env({}) == {}


def test_the_same_token_for_two_logins_across_sources_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(OWNER_TOKENS_ENV, f"{SECRET}=alice")
    with pytest.raises(SystemExit):
        _cli.main(["--memory", "--owner-token", f"{SECRET}=bob"])
    err = capsys.readouterr().err
    assert "--owner-token: a token is given two different logins" in err
    assert SECRET not in err


def test_the_help_says_the_command_line_form_is_unsafe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "UNSAFE on a shared machine" in out
    assert "/proc/PID/cmdline" in out
    assert "--owner-tokens-file" in out
    assert OWNER_TOKENS_ENV in out


def test_the_pages_commands_make_a_tokens_file_the_room_accepts_on_a_fresh_home(
    tmp_path: Path,
) -> None:
    """Issue 29: ``printf … > ~/.letagents/owner-tokens`` failed where the folder did not exist."""
    script = runnable(ROOT / "docs" / "room-server.md")["owner-tokens.sh"]
    commands = [line.removeprefix("$ ") for line in script.splitlines() if line.startswith("$ ")]
    setup = commands[: next(i for i, c in enumerate(commands) if c.startswith("letagents-trio"))]
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(
        ["bash", "-euc", "\n".join(setup)], env={"HOME": str(home), "PATH": os.defpath}, check=True
    )
    folder = home / ".letagents"
    assert folder.stat().st_mode & 0o777 == 0o700
    assert read_owner_tokens_file(folder / "owner-tokens") == {"s3cret": "alice"}


def test_the_cli_reads_person_tokens_and_grants_room_admins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 row 5 / issue 30 row 5: only a person signed in changes a room's settings
    (the API's ``settings.ts``), so the room takes person tokens (a private file or
    ``LETAGENTS_ROOM_PERSON_TOKENS``); ``--room-admin ROOM=LOGIN`` is the explicit grant."""
    monkeypatch.setenv(PERSON_TOKENS_ENV, "p2=bob")
    path = tokens_file(tmp_path, f"{SECRET}-person=alice\n")
    room = served_room(
        monkeypatch,
        [
            "--owner-token",
            "t1=alice",
            "--person-tokens-file",
            str(path),
            "--room-admin",
            "owner/repo=bob",
        ],
    )
    assert dict(room.person_tokens) == {f"{SECRET}-person": "alice", "p2": "bob"}
    row = room.store.get_room("owner/repo")
    assert row is not None
    assert row.admins == (account_id("bob"),)


def test_a_token_that_is_both_an_owner_and_a_person_token_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PERSON_TOKENS_ENV, f"{SECRET}=alice")
    monkeypatch.setattr(_cli, "_run", lambda *_: pytest.fail("the room started"))
    with pytest.raises(SystemExit):
        _cli.main(["--memory", "--owner-token", f"{SECRET}=alice"])
    err = capsys.readouterr().err
    assert "both an owner token and a person token" in err
    assert SECRET not in err


def test_the_dev_account_gets_a_person_token_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(OWNER_TOKENS_ENV, raising=False)
    monkeypatch.delenv(PERSON_TOKENS_ENV, raising=False)
    room = served_room(monkeypatch, [])
    assert set(room.owner_tokens.values()) == set(room.person_tokens.values()) == {"dev"}
    (person,) = room.person_tokens
    (owner,) = room.owner_tokens
    err = capsys.readouterr().err.splitlines()
    # Issue 42: each token alone at the end of its line (a copied word took a comma).
    assert f"dev account 'dev' owner token: {owner}" in err
    assert f"dev account 'dev' person token: {person}" in err
