"""Which rooms keep their chat on this machine (the chat-storage settings file).

The Node client decides per room whether its chat lives in the cloud (the
hosted room API) or in a local SQLite database, from a small JSON file
(PROTOCOL §6.1)::

    {"mode": "cloud" | "local", "roomOverrides": {"<room_id>": "local" | "cloud"}}

at ``~/.letagents/chat-storage.json`` unless a path is given (the MCP server
passes ``LETAGENTS_CHAT_STORAGE_SETTINGS_PATH`` when it is set). A room's
override wins; otherwise ``mode`` decides. Worker handles ask this before
registering: a local room gets a ``local_`` session and no HTTP at all.

The file is read on every question (it is a few bytes), so a user who flips a
room to local storage does not have to restart the server. A missing file
means the defaults (everything in the cloud). A damaged file, or a value other
than ``"local"`` / ``"cloud"``, also falls back to the defaults, with a
warning in the log: guessing "local" would hide a hosted room's chat from its
participants, and the warning says which file to fix.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, final

import attrs

from ._paths import CHAT_STORAGE_FILE, letagents_file

__all__ = [
    "ChatStorage",
    "ChatStorageSettings",
]

logger = logging.getLogger("letagents_trio.chat_storage")

# The two storage modes the settings file knows.
_MODES: Final = ("cloud", "local")


def _to_path(value: os.PathLike[str] | str | None) -> Path:
    return letagents_file(CHAT_STORAGE_FILE) if value is None else Path(value)


def _freeze_overrides(value: Mapping[str, str]) -> Mapping[str, str]:
    return dict(value)


@final
@attrs.frozen(kw_only=True)
class ChatStorageSettings:
    """One reading of the settings file.

    Attributes:
        mode: ``"cloud"`` or ``"local"``: where rooms without an override live.
        room_overrides: room id to ``"cloud"`` or ``"local"``.
    """

    mode: str = "cloud"
    room_overrides: Mapping[str, str] = attrs.field(factory=dict, converter=_freeze_overrides)

    def is_local(self, room_id: str) -> bool:
        """Whether ``room_id`` keeps its chat on this machine."""
        return self.room_overrides.get(room_id, self.mode) == "local"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChatStorageSettings:
        """Parse the file's JSON object; unknown values are ignored.

        Raises:
            ValueError: ``mode`` or an override is present but is not
                ``"cloud"`` / ``"local"``, or ``roomOverrides`` is not an object.
        """
        mode = data.get("mode", "cloud")
        if mode not in _MODES:
            raise ValueError(f"mode must be 'cloud' or 'local', not {mode!r}")
        raw = data.get("roomOverrides", {})
        if not isinstance(raw, Mapping):
            raise ValueError("roomOverrides must be an object")
        overrides: dict[str, str] = {}
        for room_id, value in raw.items():
            if value not in _MODES:
                raise ValueError(f"roomOverrides[{room_id!r}] must be 'cloud' or 'local'")
            overrides[str(room_id)] = value
        return cls(mode=mode, room_overrides=overrides)


@final
@attrs.define(eq=False)
class ChatStorage:
    """The chat-storage settings file, read afresh on every question.

    Args:
        path: the settings file; ``None`` means ``~/.letagents/chat-storage.json``.
    """

    path: Path = attrs.field(default=None, converter=_to_path)

    def settings(self) -> ChatStorageSettings:
        """Read the file: the defaults when it is missing or damaged (damage is logged)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return ChatStorageSettings()
        except OSError as exc:
            logger.warning("cannot read chat storage settings %s: %s", self.path, exc)
            return ChatStorageSettings()
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            return ChatStorageSettings.from_json(data)
        except (UnicodeDecodeError, ValueError) as exc:
            logger.warning(
                "chat storage settings %s are invalid (%s); every room is in the cloud",
                self.path,
                exc,
            )
            return ChatStorageSettings()

    def is_local(self, room_id: str) -> bool:
        """Whether ``room_id`` keeps its chat on this machine (a short synchronous read)."""
        return self.settings().is_local(room_id)
