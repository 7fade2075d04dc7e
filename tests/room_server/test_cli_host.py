"""``letagents-trio room --host`` beyond loopback (issue 30, row 9): in ``--help``, and a warning.

The room speaks plain HTTP. Before, nothing said that binding another
address sends every owner and session bearer token across the network in
clear. The server itself is not started here (``_cli._run`` is replaced, as
in ``test_owner_tokens.py``): nothing binds a non-loopback address.
"""

from __future__ import annotations

import logging

import pytest
import trio

from letagents_trio.room_server import Room, _cli

WARNING = (
    "binding {host}, beyond loopback: the room speaks plain HTTP (no TLS), so owner and"
    " session bearer tokens cross the network in clear; serve other machines through a"
    " TLS-terminating proxy"
)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LocalHost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.7", False),
        ("room.example", False),
    ],
)
def test_which_hosts_are_loopback(host: str, loopback: bool) -> None:
    assert _cli.is_loopback(host) is loopback


def started(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    served: list[tuple[str, int]] = []

    async def serve(room: Room, host: str, port: int) -> None:
        served.append((host, port))
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(_cli, "_run", serve)
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # leave root logging be
    assert _cli.main(["--memory", "--owner-token", "t=alice", "--host", host]) == 0
    assert served == [(host, 3001)]


@pytest.mark.parametrize(
    ("host", "warned"),
    [
        ("0.0.0.0", True),
        ("192.0.2.7", True),
        ("room.example", True),
        ("127.0.0.1", False),
        ("::1", False),
        ("localhost", False),
    ],
)
def test_a_room_bound_beyond_loopback_warns_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, host: str, warned: bool
) -> None:
    with caplog.at_level(logging.WARNING, logger="letagents_trio.room_server"):
        started(monkeypatch, host)
    beyond = [m for m in caplog.messages if "beyond loopback" in m]
    assert beyond == ([WARNING.format(host=host)] if warned else [])


def test_the_help_says_host_beyond_loopback_is_unsafe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "--host HOST address to bind (127.0.0.1). UNSAFE beyond loopback: the room speaks"
        " plain HTTP, no TLS, so owner and session bearer tokens cross the network in clear"
    ) in out
