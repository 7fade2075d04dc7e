"""The page where a person approves a device sign-in (``GET`` and ``POST /device``).

A program that called ``POST /auth/device/start`` shows its user a code and
this page's address (``verification_uri``). The page is a plain HTML form,
no script: the user code (filled in when the address carries
``?user_code=``), the person's sign-in token (a *person token* of the room,
``--person-tokens-file``: the reference room's stand-in for signing in with
GitHub), and two buttons, *Approve* and *Deny*. The form posts
``application/x-www-form-urlencoded`` back to the same path, and the answer is
a page that says what happened, with a status a program can check too: 200
approved or denied, 400 a form without a code, 401 a token that is no
person's, 404 a code that is unknown or expired, 409 a code already decided.

Nothing on the page echoes a token; what it echoes of the form (the code) is
HTML-escaped. The person's token in the form is what stops another site from
approving a code with a forged post. Pages are never cached and may not be
framed (``Content-Security-Policy``).
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qs

from ._device import DEVICE_PAGE_PATH, Decision

__all__ = ["decision_page", "form_fields", "form_page", "send_page"]

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# Shown back of a typed code at most this long (a user code is 9 characters).
_MAX_SHOWN_CODE: Final = 32
_HEADERS: Final = (
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self';"
        b" frame-ancestors 'none'",
    ),
)
_STYLE: Final = (
    "body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}"
    "label{display:block;margin-top:1rem}input{font-size:1.1rem;width:100%}"
    "button{margin-top:1.2rem;margin-right:.6rem;font-size:1.1rem}"
)
_OUTCOMES: Final = {
    "approved": ("Device approved", "The program signs in as {login} at its next poll."),
    "denied": ("Device denied", "The program is told it was denied; nothing was signed in."),
    "unknown_code": ("Unknown code", "No pending sign-in has that code, or it expired."),
    "not_signed_in": ("Not signed in", "That sign-in token is not a person's token of this room."),
    "already_decided": ("Already decided", "That code was approved or denied already."),
    "no_code": ("No code", "Type the code the program showed you."),
}


def _document(title: str, body: str) -> bytes:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    ).encode()


def form_page(user_code: str | None) -> bytes:
    """The approval form, with ``user_code`` filled in when given."""
    code = html.escape((user_code or "")[:_MAX_SHOWN_CODE], quote=True)
    return _document(
        "Sign in a device",
        "<p>A program asked to sign in to this room as you. Check that the code matches"
        " the one it shows, then approve it.</p>"
        f'<form method="post" action="{DEVICE_PAGE_PATH}">'
        f'<label>Code <input name="user_code" value="{code}" autocomplete="off" required></label>'
        '<label>Your sign-in token <input name="token" type="password" required></label>'
        '<button type="submit" name="decision" value="approve">Approve</button>'
        '<button type="submit" name="decision" value="deny">Deny</button>'
        "</form>",
    )


def decision_page(decision: Decision) -> bytes:
    """The page that says what a decision came to."""
    title, text = _OUTCOMES[decision.outcome]
    return _document(title, f"<p>{html.escape(text.format(login=decision.login or ''))}</p>")


def form_fields(raw: bytes) -> dict[str, str]:
    """An urlencoded form's fields (the first value of each); undecodable bytes are dropped."""
    text = raw.decode("utf-8", errors="replace")
    try:
        fields = parse_qs(text, max_num_fields=16)
    except ValueError:  # more fields than any form of this page has
        return {}
    return {key: values[0] for key, values in fields.items()}


async def send_page(send: Send, status: int, page: bytes) -> None:
    """Send ``page`` as an HTML answer with ``status``."""
    headers = [*_HEADERS, (b"content-length", str(len(page)).encode("ascii"))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": page, "more_body": False})
