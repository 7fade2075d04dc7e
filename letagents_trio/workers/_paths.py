"""Where the letagents files live: ``~/.letagents/<name>``, unless the entry point says otherwise.

The Node client and this library share three files in the user's
``~/.letagents`` directory: the state file, the chat-storage settings and the
local rooms' chat database. Each has a variable of the Node client that
overrides its path. The library's classes never read those variables: a
class built without a path uses :func:`letagents_file` of its default name,
and only the MCP server's entry point (``ServerConfig.from_env``) applies the
override, so an embedder decides for itself where its files go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = [
    "CHAT_STORAGE_FILE",
    "CHAT_STORAGE_SETTINGS_ENV",
    "LETAGENTS_DIR",
    "LOCAL_CHAT_DB_ENV",
    "LOCAL_CHAT_FILE",
    "OWNER_TOKEN_ENV",
    "STATE_FILE",
    "STATE_PATH_ENV",
    "letagents_file",
]

# The directory under the home directory that the Node client uses too.
LETAGENTS_DIR: Final = ".letagents"
# The shared state file (PROTOCOL §6.3) and the Node client's variable for its path.
STATE_FILE: Final = "mcp-state.json"
STATE_PATH_ENV: Final = "LETAGENTS_STATE_PATH"
# Which rooms are local (PROTOCOL §6.1), and the Node client's variable for its path.
CHAT_STORAGE_FILE: Final = "chat-storage.json"
CHAT_STORAGE_SETTINGS_ENV: Final = "LETAGENTS_CHAT_STORAGE_SETTINGS_PATH"
# The local rooms' chat, and the Node client's variable for its path.
LOCAL_CHAT_FILE: Final = "local-chat.sqlite"
LOCAL_CHAT_DB_ENV: Final = "LETAGENTS_LOCAL_CHAT_DB"
# The Node client's variable for the owner token; without it, the state file's
# auth.token (read afresh for every request, so only the variable needs a restart).
OWNER_TOKEN_ENV: Final = "LETAGENTS_TOKEN"


def letagents_file(name: str) -> Path:
    """``~/.letagents/<name>``: where a letagents file lives unless its path is given."""
    return Path.home() / LETAGENTS_DIR / name
