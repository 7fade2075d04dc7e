"""A cancellable stdin for the SDK's stdio transport.

The SDK's ``stdio_server()`` reads stdin in a worker thread
(``anyio.wrap_file``); a blocked ``readline`` cannot be cancelled, so a server
told to stop by a signal would wait for the host's next line before it could
exit. Here stdin is read by trio itself: :func:`claim_stdin` duplicates fd 0
onto a private descriptor, points fd 0 at the null device (so nothing else in
the process, or a child it starts, can read protocol bytes), and wraps the
private descriptor in a :class:`trio.lowlevel.FdStream`, whose reads are
ordinary trio checkpoints. :class:`StdinLines` splits the bytes into lines
for ``stdio_server(stdin=...)``; stdout stays the SDK's (it diverts fd 1 to
stderr while serving, so stray prints never reach the wire).

On exit fd 0 is restored and the private descriptor closed (``FdStream``
puts back its blocking mode).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, final

import trio

__all__ = ["MAX_LINE_BYTES", "StdinLines", "claim_stdin"]

# A JSON-RPC message longer than this is not one a host sends; dropping it
# keeps memory bounded against a runaway writer.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
# One read's worth: large enough for typical messages in one syscall.
_READ_SIZE: Final = 65536


@final
class StdinLines:
    """Lines of UTF-8 text from a trio receive stream, as ``async for`` yields them.

    Empty lines are skipped (a host may send blank keep-alive lines); a final
    line without a newline is still yielded at end of file; a line longer than
    :data:`MAX_LINE_BYTES` is dropped whole.
    """

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._eof = False
        self._dropping = False

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        """The next non-empty line, newline included.

        Cancellation:
            A checkpoint; cancelled while waiting, nothing is lost (bytes
            read stay in the buffer for the next call).
        """
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                raw = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                if self._dropping:
                    self._dropping = False
                    continue
                if raw.strip():
                    await trio.lowlevel.checkpoint()
                    return raw.decode("utf-8", errors="replace")
                continue
            if self._eof:
                raw, self._buffer = bytes(self._buffer), bytearray()
                if raw.strip() and not self._dropping:
                    await trio.lowlevel.checkpoint()
                    return raw.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            if len(self._buffer) > MAX_LINE_BYTES:
                self._buffer.clear()
                self._dropping = True
            try:
                chunk = await self._stream.receive_some(_READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                chunk = b""
            if not chunk:
                self._eof = True
            self._buffer += chunk


@contextmanager
def claim_stdin(fd: int = 0) -> Iterator[StdinLines]:
    """Read ``fd`` (stdin) through trio while the block runs.

    Yields:
        The lines of stdin. At end of file (the host closed its side) the
        iteration ends.

    ``fd`` points at the null device meanwhile, and is restored on exit,
    whatever the reason.
    """
    original = os.dup(fd)
    private = os.dup(fd)
    os.set_inheritable(private, False)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    except OSError:
        pass  # Serve anyway; only the diversion is lost.
    stream = trio.lowlevel.FdStream(private)
    try:
        yield StdinLines(stream)
    finally:
        # Restores the blocking mode and closes the private descriptor.
        stream.close()
        os.dup2(original, fd)
        os.close(original)
