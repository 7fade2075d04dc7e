"""What a person does on the room's device sign-in page, as a browser does it.

GET the address the program showed, read the form out of the HTML (its
action, method, inputs and buttons), type the code and the person's sign-in
token into it, press a button, and submit it urlencoded. Shared by the
room's tests, the MCP tools' tests and the end-to-end test over a real room.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

if TYPE_CHECKING:
    import httpx2


class PageForm(HTMLParser):
    """The first form of a page: its action, method, inputs (name → value) and buttons."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.method = "get"
        self.fields: dict[str, str] = {}
        self.buttons: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "form" and self.action is None:
            self.action, self.method = found.get("action", ""), found.get("method", "get")
        elif tag == "input" and "name" in found:
            self.fields[found["name"]] = found.get("value", "")
        elif tag == "button" and "name" in found:
            self.buttons[found.get("value", "")] = found["name"]


async def approve_as_person(
    http: httpx2.AsyncClient,
    verification_uri: str,
    user_code: str,
    token: str,
    choice: str = "approve",
) -> httpx2.Response:
    """Open the page, fill in the code and the token, press ``choice``; the answer page.

    ``http`` reaches the room (its base URL, or any: the page's path is what is opened).
    """
    page = await http.get(urlsplit(verification_uri).path)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    form = PageForm()
    form.feed(page.text)
    assert form.method == "post"
    assert form.action is not None
    assert set(form.fields) == {"user_code", "token"}
    filled = {**form.fields, "user_code": user_code, "token": token}
    filled[form.buttons[choice]] = choice
    return await http.post(urljoin(urlsplit(verification_uri).path, form.action), data=filled)
