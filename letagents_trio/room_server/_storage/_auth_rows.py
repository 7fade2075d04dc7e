"""Rows of sign-in: the owner tokens the room minted for an approved device sign-in.

A token the device flow hands out (:mod:`.._auth._device`) must keep working
after a restart over the same SQLite file, so it is a row, as the letagents
API keeps its owner tokens in its database. Only the token's SHA-256 is
kept, never the token: the room recognises a bearer by hashing it.
"""

from __future__ import annotations

from typing import final

import attrs

__all__ = ["MintedTokenRow"]


@final
@attrs.frozen(kw_only=True)
class MintedTokenRow:
    """An owner token the room minted.

    Attributes:
        token_hash: the SHA-256 hex of the token (the row's key).
        login: the account the token acts for.
        created_at: when it was minted (epoch ms).
        source: how it was obtained (``"device_flow"``).
    """

    token_hash: str
    login: str
    created_at: int
    source: str = "device_flow"
