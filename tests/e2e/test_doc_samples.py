"""The embedding guide's console samples are what the programs print (issue 42).

``docs/embedding.md`` shows a terminal: ``letagents-trio room --memory --port 0``
printing its dev account's tokens and its address, then
``nurseries/embed_in_your_loop.py`` run with that address and the owner token.
This test runs both, as the page says, and compares every line with the page's,
the tokens and the port aside (they are fresh each run). A sample that drifts
from the programs fails here; one copied from the page works (the token is the
last word of its line: a copied word once took a comma with it).
Real processes and the real clock, bounded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import trio

from ..doc_blocks import ROOT, blocks

PAGE = ROOT / "docs" / "embedding.md"
NURSERY = ROOT / "nurseries" / "embed_in_your_loop.py"
BUDGET = 60
# A token the room makes (secrets.token_urlsafe(24)): 32 URL-safe characters.
TOKEN = r"[A-Za-z0-9_-]{32}"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX")


def _console_samples() -> tuple[list[str], list[str]]:
    """The room's lines, and the embedder's program's lines, as the page shows them."""
    room, program = [b.code for b in blocks(PAGE) if b.info == "console"][:2]
    return room.splitlines(), program.splitlines()


def _shape(line: str) -> str:
    """``line`` with its tokens, log time and port made placeholders."""
    line = re.sub(r"(?<=token: )" + TOKEN + "$", "<token>", line)
    line = re.sub(r"(?<=LETAGENTS_TOKEN=)" + TOKEN, "<token>", line)
    line = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "<time> ", line)
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", line)


async def test_the_rooms_and_the_embedders_samples_are_what_they_print() -> None:
    room_sample, program_sample = _console_samples()
    assert room_sample[0] == "$ letagents-trio room --memory --port 0"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LETAGENTS_")}
    room = await trio.lowlevel.open_process(
        [sys.executable, "-m", "letagents_trio", "room", "--memory", "--port", "0"],
        stderr=subprocess.PIPE,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )
    assert room.stderr is not None
    try:
        with trio.fail_after(BUDGET):
            printed = b""
            while b"letagents room on " not in printed or not printed.endswith(b"\n"):
                chunk = await room.stderr.receive_some()
                assert chunk, printed.decode()
                printed += chunk
            lines = printed.decode().splitlines()
            assert [_shape(line) for line in lines] == [_shape(s) for s in room_sample[1:]]
            # The token as a reader copies it: the last word of the owner-token line.
            owner_token = next(ln for ln in lines if "owner token: " in ln).split()[-1]
            url = lines[-1].split()[-1]
            # The program, run as the page's second terminal runs it.
            assert _shape(program_sample[0]).startswith(
                "$ LETAGENTS_API_URL=http://127.0.0.1:<port> LETAGENTS_TOKEN=<token>"
            )
            result = await trio.run_process(
                [sys.executable, str(NURSERY)],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**env, "LETAGENTS_API_URL": url, "LETAGENTS_TOKEN": owner_token},
            )
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout.decode().splitlines() == program_sample[2:]
    finally:
        room.kill()
        with trio.move_on_after(5, shield=True):
            await room.wait()
        await room.stderr.aclose()
