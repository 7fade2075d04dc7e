"""What a held TLS stream of the lean path keeps in OpenSSL's memory once it is idle.

A hosted room holds thousands of idle TLS streams per process, and what each
keeps is what OpenSSL allocated for it with ``malloc``, which no Python tool
sees: these tests read glibc's own count of the bytes in use (``mallinfo2``)
around one step of many streams, and are skipped where the C library is not
glibc. Loopback sockets, trio's server side with a certificate made for the
test (:func:`.tiny_room.self_signed`); the real clock, bounded by
``trio.fail_after``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import TYPE_CHECKING

import pytest
import trio

from letagents_trio._http._tls import TLSStream, open_tls

from .tiny_room import self_signed

if TYPE_CHECKING:
    from pathlib import Path

# Streams measured together: what each keeps shows far above the allocator's noise.
STREAMS = 32
# OpenSSL's write buffer alone is over 16 KiB; what a stream may keep from one
# read of the server's session tickets and its first data (the new session).
KEPT_PER_STREAM = 8 * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _malloc_in_use() -> int:
    """Bytes the C allocator has handed out and not had back (glibc's mallinfo2)."""
    path = ctypes.util.find_library("c")
    libc = ctypes.CDLL(path) if path else None
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        pytest.skip("the C library is not glibc (no mallinfo2)")
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


async def test_an_idle_stream_keeps_no_write_buffer_after_the_servers_tickets(
    tmp_path: Path,
) -> None:
    """After its first read (the TLS 1.3 session tickets, then data), a stream keeps under 8 KiB.

    Reading a post-handshake message (the tickets every TLS 1.3 server sends
    after the handshake) makes OpenSSL set up its write buffer too, over 16
    KiB, and it frees that buffer only after a write: a held SSE stream never
    writes again until its exit.
    """
    server_tls, client_tls = self_signed(tmp_path)
    assert server_tls.num_tickets > 0
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    [listener] = listeners
    port = listener.socket.getsockname()[1]
    ours: list[TLSStream] = []
    theirs: list[trio.SSLStream[trio.SocketStream]] = []

    async def accept() -> None:
        server = trio.SSLStream(await listener.accept(), server_tls, server_side=True)
        await server.do_handshake()  # the tickets go with its end
        theirs.append(server)

    with trio.fail_after(30):
        try:
            for _ in range(STREAMS):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(accept)
                    raw = await trio.open_tcp_stream("127.0.0.1", port)
                    ours.append(await open_tls(raw, client_tls, "127.0.0.1"))
            for server in theirs:
                await server.send_all(b"data")
            gc.collect()
            before = _malloc_in_use()
            for client in ours:
                assert await client.receive_some() == b"data"
            kept = _malloc_in_use() - before
            assert kept < STREAMS * KEPT_PER_STREAM, f"{kept / STREAMS:.0f} bytes kept a stream"
            # Still a working stream both ways.
            await ours[0].send_all(b"ping")
            assert await theirs[0].receive_some() == b"ping"
        finally:
            for client in ours:
                await client.aclose()
            for server in theirs:
                await trio.aclose_forcefully(server)
            await listener.aclose()
