"""The demo's options (issue 30, row 9): a token on the command line is called unsafe."""

from __future__ import annotations

from letagents_trio._demo._cli import build_parser


def test_the_help_says_owner_token_on_the_command_line_is_unsafe() -> None:
    text = " ".join(build_parser().format_help().split())
    assert (
        "owner bearer token for --api-url (default: $LETAGENTS_TOKEN). UNSAFE on a shared"
        " machine: any local user can read it from /proc/PID/cmdline or ps; set"
        " $LETAGENTS_TOKEN there"
    ) in text
