"""Messages (R7, R8) and the delivery connection a long poll stands for.

Request checks are pure functions that return the parsed value or refuse
(:func:`parse_cursor`, :func:`parse_before`, :func:`parse_page_size`,
:func:`parse_wait_ms`, :func:`message_text`); the :class:`MessageBoard`
authenticates, stores, renders messages with their thread (the rules of
:mod:`._threads`), and wakes the room's open polls (one
:class:`~letagents_trio._util.Notifier` per room with a poll waiting).

Reading. ``GET …/messages?after=`` pages forward from a cursor (oldest first);
``?before=latest`` is the room's newest page and ``?before=<id>`` the page
just older than that message, each still oldest first, with ``has_older``
(and ``has_more``, the same) saying whether older messages remain, as the
letagents API answers them.

Delivery (§7.1): an open poll of a session, and the 12 s after the last one
closed, count as an open delivery connection for the presence rules.
:class:`Deliveries` keeps that per session.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from ..._protocol import (
    BAD_CURSOR_TEXT,
    DEFAULT_MESSAGE_PAGE,
    DEFAULT_POLL_TIMEOUT,
    MAX_MESSAGE_CHARS,
    MAX_MESSAGE_PAGE,
    TEXT_REQUIRED_TEXT,
    TEXT_TOO_LONG_TEXT,
)
from ..._util import Notifier
from .._sessions._presence import AGENT_DELIVERY_LINGERS_MS
from .._storage._rows import MessageRow
from .._wire import Credentials, Refusal, Reply, iso, refuse
from ._threads import (
    REPLY_TO_INVALID_TEXT,
    REPLY_TO_MISSING_TEXT,
    THREAD_ROOT_INVALID_TEXT,
    THREAD_ROOT_MISSING_TEXT,
    message_ref,
    reference_json,
    root_of,
    thread_json,
    thread_of,
)

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._store import RoomStore

__all__ = [
    "BAD_BEFORE_TEXT",
    "BAD_LIMIT_TEXT",
    "BAD_TIMEOUT_TEXT",
    "DEFAULT_POLL_TIMEOUT_MS",
    "LIVENESS_SENDER",
    "LIVENESS_SOURCE",
    "PERSON_SOURCE",
    "Deliveries",
    "MessageBoard",
    "message_json",
    "message_text",
    "parse_before",
    "parse_cursor",
    "parse_page_size",
    "parse_wait_ms",
]

BAD_TIMEOUT_TEXT: Final = "timeout must be a number of milliseconds"
BAD_LIMIT_TEXT: Final = "limit must be a positive integer"
# Ours: a ``before`` that is neither ``latest`` nor a message id.
BAD_BEFORE_TEXT: Final = "before must be a message id or latest"
# The ``before`` that asks for the room's newest page.
LATEST: Final = "latest"
# Poll timeout when the request names none, in the room's milliseconds.
DEFAULT_POLL_TIMEOUT_MS: Final = round(DEFAULT_POLL_TIMEOUT * 1000)
# Cursors longer than this are no message id (and would not fit the store's integer).
_MAX_CURSOR_DIGITS: Final = 18
# A message's own id from its client (``client_message_id``): a retry with it
# answers the message already posted.
MAX_CLIENT_MESSAGE_ID: Final = 200
CLIENT_MESSAGE_ID_TEXT: Final = "client_message_id must be a string of at most 200 characters"
# Room notices (liveness, §7.5) are posted as the room itself, marked as such.
LIVENESS_SENDER: Final = "letagents"
LIVENESS_SOURCE: Final = "agent_liveness"
# Messages people post (an admin answering a request) are marked as the browser's.
PERSON_SOURCE: Final = "browser"


def message_json(
    message: MessageRow,
    *,
    reply: MessageRow | None = None,
    thread: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON of a message, with what it answers (``reply``) and its thread's summary."""
    created = iso(message.created_at)
    shown = {"addressed_to": message.addressed_to, "display_text": message.display_text}
    return {
        **{key: value for key, value in shown.items() if value is not None},
        "id": str(message.message_id),
        "room_id": message.room_id,
        "sender": message.sender,
        "text": message.text,
        "created_at": created,
        "timestamp": created,
        "agent_session_id": message.agent_session_id,
        "source": message.source,
        "prompt_kind": message.prompt_kind,
        "reply_to": None if reply is None else reference_json(reply),
        "thread_root_id": str(root_of(message)),
        "thread_reply_to_id": None if message.reply_to_id is None else str(message.reply_to_id),
        "thread": thread,
    }


def _client_dedupe_id(agent_key: str, client_id: object) -> str | None:
    """The dedupe id of a client's own message id (a retry posts nothing new), or refuse."""
    if client_id is None:
        return None
    if not isinstance(client_id, str) or not 0 < len(client_id) <= MAX_CLIENT_MESSAGE_ID:
        refuse(400, CLIENT_MESSAGE_ID_TEXT)
    return f"client:{agent_key}:{client_id}"


def parse_cursor(after: str | None) -> int:
    """The message id a read starts after (0 when none), or refuse 400."""
    if after is None or after == "":
        return 0
    if not (after.isascii() and after.isdigit()) or len(after) > _MAX_CURSOR_DIGITS:
        refuse(400, BAD_CURSOR_TEXT)
    return int(after)


def parse_before(before: str | None) -> int | None:
    """The message id a backward read starts below; ``None`` for ``latest``, or refuse 400."""
    if before == LATEST:
        return None
    if (
        not before
        or not (before.isascii() and before.isdigit())
        or len(before) > _MAX_CURSOR_DIGITS
    ):
        refuse(400, BAD_BEFORE_TEXT)
    return int(before)


def parse_page_size(limit: str | None) -> int:
    """The page size asked for, clamped to 1 … :data:`MAX_MESSAGE_PAGE`, or refuse 400."""
    if not limit:
        return DEFAULT_MESSAGE_PAGE
    if not (limit.isascii() and limit.isdigit()):  # "¹".isdigit() holds; int("¹") raises
        refuse(400, BAD_LIMIT_TEXT)
    return max(1, min(int(limit[:6]), MAX_MESSAGE_PAGE))


def parse_wait_ms(wait_ms: str | None) -> float:
    """The poll timeout asked for in ms (30 000 when none), or refuse 400; not yet capped."""
    if not wait_ms:
        return DEFAULT_POLL_TIMEOUT_MS
    if not wait_ms.isascii():  # float() reads fullwidth "１" as 1; JavaScript's Number does not
        refuse(400, BAD_TIMEOUT_TEXT)
    try:
        wait = float(wait_ms)
    except ValueError:
        refuse(400, BAD_TIMEOUT_TEXT)
    if math.isnan(wait):
        refuse(400, BAD_TIMEOUT_TEXT)
    return wait


def message_text(body: Mapping[str, Any]) -> str:
    """The text a message send carries, or refuse (400 blank, 413 too long)."""
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        refuse(400, TEXT_REQUIRED_TEXT)
    if len(text) > MAX_MESSAGE_CHARS:
        refuse(413, TEXT_TOO_LONG_TEXT)
    return text


@attrs.define(eq=False)
class _Delivery:
    open_polls: int = 0
    closed_at: int | None = None


@final
@attrs.define(eq=False)
class Deliveries:
    """Which sessions have a delivery connection: an open poll, or one closed < 12 s ago."""

    _sessions: dict[str, _Delivery] = attrs.field(init=False, factory=dict)

    def poll_opened(self, session_id: str) -> None:
        """Count one more open poll of the session."""
        self._sessions.setdefault(session_id, _Delivery()).open_polls += 1

    def poll_closed(self, session_id: str, now: int) -> None:
        """Count one poll of the session closed at ``now`` (the linger starts)."""
        delivery = self._sessions[session_id]
        delivery.open_polls -= 1
        delivery.closed_at = now

    def connected(self, session_id: str, now: int) -> bool:
        """True while a poll of the session is open, or closed less than 12 s before ``now``."""
        delivery = self._sessions.get(session_id)
        if delivery is None:
            return False
        if delivery.open_polls > 0:
            return True
        return delivery.closed_at is not None and now - delivery.closed_at < (
            AGENT_DELIVERY_LINGERS_MS
        )

    def open_polls(self) -> int:
        """How many polls are open, over every session."""
        return sum(d.open_polls for d in self._sessions.values())


@final
@attrs.define(eq=False)
class MessageBoard:
    """Every room's messages (R7, R8), their long polls and the delivery these stand for.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: authenticates the calls.
        poll_max_ms: the long-poll cap.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    poll_max_ms: int
    deliveries: Deliveries = attrs.field(init=False, factory=Deliveries)
    _changed: dict[str, Notifier] = attrs.field(init=False, factory=dict)
    # What other parts add to a room's messages: ``room_id -> {message_id: fields}``.
    attachments: list[Callable[[str], Mapping[int, Mapping[str, Any]]]] = attrs.field(
        init=False, factory=list
    )

    def _add(self, message: MessageRow) -> MessageRow:
        """Store a message and wake its room's polls."""
        stored = self.store.add_message(message)
        self.wake(message.room_id)
        return stored

    def wake(self, room_id: str) -> None:
        """Let the room's open polls re-check (a message came, or a session ended)."""
        changed = self._changed.get(room_id)
        if changed is not None:
            changed.notify()

    def render(self, room_id: str, rows: Sequence[MessageRow]) -> list[dict[str, Any]]:
        """The JSON of ``rows``, each with what it answers and its thread's summary."""
        rendered = []
        summaries: dict[int, dict[str, Any] | None] = {}
        attached: dict[int, Mapping[str, Any]] = {}
        for attach in self.attachments if rows else ():
            attached.update(attach(room_id))
        for row in rows:
            reply = None
            if row.reply_to_id is not None:
                reply = self.store.get_message(room_id, row.reply_to_id)
            root = root_of(row)
            if root not in summaries:
                count, latest = self.store.thread_replies(room_id, root)
                summaries[root] = thread_json(root, count, latest) if count else None
            shown = message_json(row, reply=reply, thread=summaries[root])
            rendered.append({**shown, **attached.get(row.message_id, {})})
        return rendered

    def _page(
        self, room_id: str, found: Sequence[MessageRow], limit: int, *, older: bool = False
    ) -> dict[str, Any]:
        """One page of ``limit`` messages, fetched as ``limit + 1`` to say whether there is
        more (newer ones; with ``older``, older ones, which come first)."""
        more = len(found) > limit
        rows = (found[1:] if older else found[:limit]) if more else found
        page: dict[str, Any] = {
            "messages": self.render(room_id, rows),
            "has_more": more,
            "room_id": room_id,
        }
        if older:
            page["has_older"] = more
        return page

    def _referenced(self, room_id: str, number: int | None, missing_text: str) -> MessageRow | None:
        if number is None:
            return None
        found = self.store.get_message(room_id, number)
        if found is None:
            refuse(400, missing_text)
        return found

    def send(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """R8: post a chat message as the session, in the thread ``reply_to`` or
        ``thread_root_id`` name (the rules of :mod:`._threads`)."""
        try:
            self.accounts.require_room(room_id)
            row = self.accounts.authenticate(room_id, creds, worker_only=False)
            text = message_text(body)
            reply = self._referenced(
                room_id,
                message_ref(body, "reply_to", REPLY_TO_INVALID_TEXT),
                REPLY_TO_MISSING_TEXT,
            )
            named = self._referenced(
                room_id,
                message_ref(body, "thread_root_id", THREAD_ROOT_INVALID_TEXT),
                THREAD_ROOT_MISSING_TEXT,
            )
            thread_root = thread_of(reply, named)
            dedupe_id = _client_dedupe_id(row.agent_key, body.get("client_message_id"))
        except Refusal as refusal:
            return refusal.reply
        sent = None if dedupe_id is None else self.store.message_by_dedupe_id(room_id, dedupe_id)
        if sent is not None:  # the same client message again: the one already posted
            return Reply(status=201, body=self.render(room_id, [sent])[0])
        message = self._add(
            MessageRow(
                dedupe_id=dedupe_id,
                room_id=room_id,
                sender=row.display_name,
                text=text,
                created_at=self.clock.now_ms(),
                agent_session_id=row.session_id,
                reply_to_id=None if reply is None else reply.message_id,
                thread_root_id=thread_root,
            )
        )
        return Reply(status=201, body=self.render(room_id, [message])[0])

    def post_notice(
        self,
        room_id: str,
        text: str,
        *,
        dedupe_id: str,
        source: str,
        prompt_kind: str | None,
        addressed_to: dict[str, str] | None = None,
        display_text: str | None = None,
    ) -> MessageRow | None:
        """Post a notice as ``letagents`` once per dedupe id; ``None`` if already posted.

        ``addressed_to`` (``{agent_key, reason}``) names the agent it is for.
        """
        if self.store.message_by_dedupe_id(room_id, dedupe_id) is not None:
            return None
        return self._add(
            MessageRow(
                room_id=room_id,
                sender=LIVENESS_SENDER,
                text=text,
                created_at=self.clock.now_ms(),
                source=source,
                prompt_kind=prompt_kind,
                dedupe_id=dedupe_id,
                addressed_to=addressed_to,
                display_text=display_text,
            )
        )

    def post_person(
        self, room_id: str, text: str, *, sender: str, reply_to: int | None
    ) -> MessageRow:
        """Post a person's message (a room admin's, ``source: browser``), perhaps as a
        reply to a message of the room (one that is gone is not answered)."""
        reply = None if reply_to is None else self.store.get_message(room_id, reply_to)
        return self._add(
            MessageRow(
                room_id=room_id,
                sender=sender,
                text=text,
                created_at=self.clock.now_ms(),
                source=PERSON_SOURCE,
                reply_to_id=None if reply is None else reply.message_id,
                thread_root_id=None if reply is None else root_of(reply),
            )
        )

    def read(
        self,
        room_id: str,
        creds: Credentials,
        *,
        after: str | None,
        limit: str | None,
        before: str | None = None,
    ) -> Reply:
        """One page of messages: after a cursor, or with ``before`` the newest ones
        (``latest``) or those just older than a message."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.authenticate(room_id, creds, worker_only=False, reading=True)
            size = parse_page_size(limit)
            if before is not None:
                below = parse_before(before)
                found = self.store.messages_before(room_id, below, size + 1)
                return Reply(status=200, body=self._page(room_id, found, size, older=True))
            cursor = parse_cursor(after)
        except Refusal as refusal:
            return refusal.reply
        found = self.store.messages_after(room_id, cursor, size + 1)
        return Reply(status=200, body=self._page(room_id, found, size))

    async def poll(
        self, room_id: str, creds: Credentials, *, after: str | None, wait_ms: str | None
    ) -> Reply:
        """R7: wait up to ``min(timeout, cap)`` ms for a message after ``after``, or the end.

        Cancellation:
            A checkpoint. Cancelled (the client went away), the poll stops
            counting as open; the 12 s linger starts then.
        """
        try:
            self.accounts.require_room(room_id)
            row = self.accounts.authenticate(room_id, creds, worker_only=False, reading=True)
            cursor = parse_cursor(after)
            wait = parse_wait_ms(wait_ms)
        except Refusal as refusal:
            await trio.lowlevel.checkpoint()
            return refusal.reply
        wait = max(0.0, min(wait, float(self.poll_max_ms)))
        deadline = trio.current_time() + wait / 1000

        def answerable() -> bool:
            if self.store.messages_after(room_id, cursor, 1):
                return True
            current = self.store.get_session(row.session_id)
            return current is None or not current.live

        changed = self._changed.setdefault(room_id, Notifier())
        self.deliveries.poll_opened(row.session_id)
        try:
            with trio.move_on_at(deadline):
                await changed.wait_until(answerable)
        finally:
            self.deliveries.poll_closed(row.session_id, self.clock.now_ms())
            if not changed.waiting:
                self._changed.pop(room_id, None)
        found = self.store.messages_after(room_id, cursor, DEFAULT_MESSAGE_PAGE + 1)
        return Reply(status=200, body=self._page(room_id, found, DEFAULT_MESSAGE_PAGE))
