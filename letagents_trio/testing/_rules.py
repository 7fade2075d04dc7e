"""The FakeRoom's fault rules: answer instead of the room, lose or hold or rewrite.

``fake_room.on(method, path)`` returns a :class:`RuleBuilder`; each action arms
a :class:`Rule` on the room, matched by method and path pattern (``{name}``
placeholders match one path segment) before the room sees the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, final

import attrs
import trio

from ._asgi import Answer, DropConnection, send_answer

if TYPE_CHECKING:
    from .._util import Notifier
    from ._asgi import Send

__all__ = [
    "JSON_HEADERS",
    "Hold",
    "Rule",
    "RuleBuilder",
    "json_bytes",
    "path_regex",
]


# The headers of a JSON answer.
JSON_HEADERS: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json")]

_RuleAction = Literal["respond", "drop_before_commit", "drop_after_commit", "hold", "rewrite"]


_PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def json_bytes(value: object) -> bytes:
    return json.dumps(value).encode("utf-8")


def path_regex(path: str | re.Pattern[str]) -> re.Pattern[str]:
    """A rule's path as a regex matched against the whole decoded path."""
    if isinstance(path, re.Pattern):
        return path
    parts, last = [], 0
    for placeholder in _PLACEHOLDER.finditer(path):
        parts.append(re.escape(path[last : placeholder.start()]))
        parts.append("[^/]+")
        last = placeholder.end()
    parts.append(re.escape(path[last:]))
    return re.compile("".join(parts))


@final
@attrs.define(eq=False, kw_only=True)
class Rule:
    """One armed fault: what the fake room does with the next matching requests.

    Made by the actions of :class:`RuleBuilder` (``fake_room.on(...)``).

    Attributes:
        method: the HTTP method it matches (upper case).
        path: the path pattern as given.
        action: what it does to a matching request.
        times_left: how many more requests it acts on; None means until removed.
        hits: how many requests it has acted on.
    """

    method: str
    path: str
    action: str
    times_left: int | None
    hits: int = 0
    _regex: re.Pattern[str] = attrs.field(alias="regex", repr=False)
    # The room's live list of armed rules, first match first.
    _rules: list[Rule] = attrs.field(alias="rules", repr=False)
    # The room's notifier: it wakes waiters whenever the room changes.
    _changed: Notifier = attrs.field(alias="changed", repr=False)
    _status: int = attrs.field(default=200, alias="status", repr=False)
    _body: bytes = attrs.field(default=b"", alias="body", repr=False)
    _headers: list[tuple[bytes, bytes]] = attrs.field(factory=list, alias="headers", repr=False)
    _rewrite: Callable[[Any], Any] | None = attrs.field(default=None, alias="rewrite", repr=False)
    _hold: Hold | None = attrs.field(default=None, alias="hold", repr=False)

    @property
    def active(self) -> bool:
        """Whether the rule still acts on matching requests."""
        return self in self._rules

    def remove(self) -> None:
        """Stop acting on requests; answers it holds now stay held until released."""
        if self.active:
            self._rules.remove(self)

    def matches(self, method: str, path: str) -> bool:
        """Whether the rule acts on a request for ``method`` and the decoded ``path``."""
        return method == self.method and self._regex.fullmatch(path) is not None

    async def act(self, send: Send, room: Callable[[], Awaitable[Answer]]) -> None:
        """Act on one matching request: answer for the room, or lose, hold or rewrite its answer.

        Args:
            send: the ASGI ``send`` of the request.
            room: lets the room act on the request and returns its answer, unsent.

        Raises:
            DropConnection: the rule loses the request, or the room's answer.

        Cancellation:
            A checkpoint; a held answer waits for its release, and a client
            gone meanwhile cancels nothing the room already did.
        """
        self.hits += 1
        if self.times_left is not None:
            self.times_left -= 1
            if self.times_left == 0:
                self.remove()
        self._changed.notify()
        if self.action == "respond":
            await send_answer(
                send, Answer(status=self._status, headers=self._headers, body=self._body)
            )
            return
        if self.action == "drop_before_commit":
            raise DropConnection(after_commit=False)
        answer = await room()
        if self.action == "drop_after_commit":
            raise DropConnection(after_commit=True)
        if self._hold is not None:
            self._hold.held += 1
            self._changed.notify()
            await self._hold._released.wait()
        elif self._rewrite is not None:
            answer = attrs.evolve(answer, body=json_bytes(self._rewrite(json.loads(answer.body))))
        await send_answer(send, answer)


@final
@attrs.define(eq=False, kw_only=True)
class Hold:
    """The release handle of a :meth:`RuleBuilder.hold` rule.

    Like a ``trio.Event``: answers wait until :meth:`release` is called once;
    from then on the rule's answers pass at once.

    Attributes:
        rule: the rule whose answers are held.
        held: how many answers the rule has held back so far (released ones included).
    """

    rule: Rule
    held: int = 0
    _released: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._released.is_set()

    def release(self) -> None:
        """Send every held answer now, and let later ones through without waiting."""
        self._released.set()

    async def wait_held(self, count: int = 1) -> None:
        """Wait until the rule has held back ``count`` answers (the room has acted on them).

        Cancellation:
            A checkpoint; cancelled, nothing changes. Bound it with
            ``trio.fail_after`` in tests.
        """
        await self.rule._changed.wait_until(lambda: self.held >= count)


@final
@attrs.frozen(kw_only=True)
class RuleBuilder:
    """The requests a rule is for; call one action to arm the rule.

    Returned by :meth:`~letagents_trio.testing.FakeRoom.on`. Every action takes ``times``: how many
    matching requests the rule acts on (default 1; None means until
    :meth:`Rule.remove`).
    """

    # The room's live list of armed rules, first match first.
    _rules: list[Rule] = attrs.field(alias="rules")
    # The room's notifier, handed to each rule armed.
    _changed: Notifier = attrs.field(alias="changed")
    method: str
    path: str | re.Pattern[str]

    def respond(
        self,
        status: int,
        json: object = None,
        *,
        headers: Mapping[str, str] | None = None,
        times: int | None = 1,
    ) -> Rule:
        """Answer ``status`` with ``json`` (None: an empty body); the room never sees the request.

        Args:
            status: the HTTP status.
            json: the body, encoded as JSON; None sends an empty body.
            headers: extra response headers.
            times: how many matching requests to answer.
        """
        raw = b"" if json is None else json_bytes(json)
        pairs = list(JSON_HEADERS) if json is not None else []
        for name, value in (headers or {}).items():
            pairs.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        return self._arm("respond", times, status=status, body=raw, headers=pairs)

    def drop_before_commit(self, *, times: int | None = 1) -> Rule:
        """Lose the request on its way: the room never sees it.

        The client sees the connection fail, as from a room that is down (in
        process; a real server answers 500, see :class:`~._asgi.DropConnection`).
        """
        return self._arm("drop_before_commit", times)

    def drop_after_commit(self, *, times: int | None = 1) -> Rule:
        """Let the room act on the request, then lose its answer.

        The client sees the connection close without an answer, as when a
        server disconnects, while the room has stored whatever it decided: the
        lost-response case a client must recover from (in process; a real
        server answers 500, see :class:`~._asgi.DropConnection`).
        """
        return self._arm("drop_after_commit", times)

    def hold(self, *, times: int | None = 1) -> Hold:
        """Let the room act on the request, then hold its answer until :meth:`Hold.release`.

        Returns:
            The release handle; :meth:`Hold.wait_held` waits until an answer is held.
        """
        rule = self._arm("hold", times)
        rule._hold = Hold(rule=rule)
        return rule._hold

    def rewrite(self, fn: Callable[[Any], Any], *, times: int | None = 1) -> Rule:
        """Let the room answer, then send ``fn(answer)`` in place of its JSON answer.

        ``fn`` gets the decoded JSON (whatever the status) and returns the JSON
        to send. It runs after the room acted and before the client hears
        anything, which also makes it the place to look at (or change) the
        world at that moment. An answer that is not JSON fails the request
        (the client gets a 500).
        """
        return self._arm("rewrite", times, rewrite=fn)

    def _arm(self, action: _RuleAction, times: int | None, **options: Any) -> Rule:
        if times is not None and times < 1:
            raise ValueError(f"times must be at least 1 or None, not {times}")
        pattern = self.path if isinstance(self.path, str) else self.path.pattern
        rule = Rule(
            method=self.method.upper(),
            path=pattern,
            action=action,
            times_left=times,
            regex=path_regex(self.path),
            rules=self._rules,
            changed=self._changed,
            **options,
        )
        self._rules.append(rule)
        return rule
