"""TLS session resumption for the lean path: a room's session offered to its next connections.

A client holds thousands of TLS connections to one room, and every one of
them, opened in full, checks the room's certificate chain and keeps its own
parsed copy of it. After one full handshake the room's session (TLS 1.3: its
session ticket, which arrives *after* the handshake, with the first records
read) lets the next connections resume instead: a smaller handshake, no
certificate to check again, and the certificate shared with the session
rather than parsed once per connection. What it buys is in
``docs/performance.md``.

**Which connections share a session.** :class:`TLSSessions` belongs to one
:class:`ssl.SSLContext` (one opener's) and keeps one :class:`RoomSessions`
per server name, port and the context's verification settings at the time
(``verify_mode``, ``check_hostname``, ``verify_flags``): a session is only
ever offered to a connection that would have checked the room the same way
the session's own full handshake did. A different room, a different name for
the same address, or a context whose checks changed never shares one, so
resumption never skips a check the connection would have made. The room may
refuse a session (it restarted, the ticket aged): that connection simply
makes a full handshake, and its fresh session replaces the refused one.

**A session is kept** once it can be resumed: under TLS 1.3 once a ticket
was read (:attr:`ssl.SSLSession.has_ticket`), which is at the connection's
first reads; under TLS 1.2 at the end of the handshake (a ticket, or a
session id the room may remember). A resumed connection does not replace
it. A connection that made a full handshake offers its session until its
first application data or its end (the tickets come before the data); a room
that issues none is simply never resumed.

**The burst.** Thousands of connections opening at once to a room not seen
yet would all find no session. So the first of them goes ahead alone (it is
*first*, and its outcome sets an event); the others, their TCP connections
made, wait for that session for at most :data:`SESSION_WAIT` seconds before
handshaking in full. The first one's outcome comes as soon as it is known: a
session kept, a handshake failed or cancelled, data or the end read with no
ticket, or the stream closed. A first connection that never tells (dropped
without a close) holds the others up for :data:`SESSION_WAIT` once; the next
opening after that goes first in its place.
"""

from __future__ import annotations

import ssl
from typing import Final, final

import trio

__all__ = ["SESSION_WAIT", "RoomSessions", "TLSSessions"]

# How long a connection waits for the first handshake's session before handshaking in
# full: the first one's handshake and the room's tickets are two round trips or so,
# and the waiting connections' own TCP connects are already made.
SESSION_WAIT: Final = 1.0
# Rooms (server name, port, checks) whose sessions are kept at once; a client talks to one or two.
MAX_ROOMS: Final = 64


def resumable(ssl_object: ssl.SSLObject) -> ssl.SSLSession | None:
    """The connection's session when a later connection could resume it, else None."""
    session = ssl_object.session
    if session is None:
        return None
    if session.has_ticket:
        return session
    # TLS 1.2 also resumes by the session id the room remembers; TLS 1.3 only by a ticket.
    if ssl_object.version() != "TLSv1.3" and session.id:
        return session
    return None


@final
class RoomSessions:
    """A room's session (a server name and port, one context's checks), and its first handshake."""

    __slots__ = ("_first", "_session")

    def __init__(self) -> None:
        self._session: ssl.SSLSession | None = None
        # Set while the first full handshake goes alone; the event is set by its outcome.
        self._first: trio.Event | None = None

    def __repr__(self) -> str:
        kept = "kept" if self._session is not None else "none"
        return f"<RoomSessions session={kept} first={self._first is not None}>"

    @property
    def session(self) -> ssl.SSLSession | None:
        """The session offered to the room's next connections, if one was kept."""
        return self._session

    async def offer(self) -> tuple[ssl.SSLSession | None, trio.Event | None]:
        """The session to offer a new connection, and whether it goes first.

        Returns:
            ``(session, None)`` with the session kept (None when there is
            none and another connection went first: this one waited for it
            at most :data:`SESSION_WAIT`), or ``(None, first)`` when this
            connection goes first: it reports its outcome with
            :meth:`keep` (``first`` passed back), whatever it is.

        Cancellation:
            A checkpoint; cancelled while waiting, nothing changes.
        """
        await trio.lowlevel.checkpoint()
        if self._session is not None:
            return self._session, None
        first = self._first
        if first is None:
            first = self._first = trio.Event()
            return None, first
        with trio.move_on_after(SESSION_WAIT):
            await first.wait()
        if not first.is_set() and self._first is first:
            # The first connection never told: the next opening goes first instead.
            self._first = None
        return self._session, None

    def keep(self, session: ssl.SSLSession | None, first: trio.Event | None = None) -> None:
        """A connection's outcome: its session to offer from now on (None: it has none).

        ``first``, for the connection that went first, lets the ones waiting go.
        """
        if session is not None:
            self._session = session
        if first is not None:
            first.set()
            if self._first is first:
                self._first = None

    def refused(self, session: ssl.SSLSession) -> None:
        """The room did not resume ``session``: stop offering it (the next opening goes first)."""
        if self._session is session:
            self._session = None


@final
class TLSSessions:
    """Each room's :class:`RoomSessions` for one :class:`ssl.SSLContext` (module docstring)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self._rooms: dict[tuple[object, ...], RoomSessions] = {}

    def __repr__(self) -> str:
        return f"<TLSSessions rooms={len(self._rooms)}>"

    def room(self, server_hostname: str, port: int) -> RoomSessions:
        """The room ``server_hostname`` names on ``port``, as the context checks now."""
        context = self.context
        checks = (context.verify_mode, context.check_hostname, context.verify_flags)
        key = (server_hostname, port, *checks)
        room = self._rooms.get(key)
        if room is None:
            if len(self._rooms) >= MAX_ROOMS:
                self._rooms.clear()
            room = self._rooms[key] = RoomSessions()
        return room
