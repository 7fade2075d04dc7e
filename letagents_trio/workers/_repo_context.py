"""A chat's repository: its git root, remote, branches, ``.letagents.json``, and visibility.

What ``check_repo``, ``initialize_repo``, ``check_repo_visibility`` and
``get_onboarding_status`` report, with the Node client's rules:

* **git** runs as the ``git`` command (``trio.run_process``, stdin closed,
  output captured and bounded, each run within :data:`GIT_TIMEOUT`); a
  failure, a timeout or no ``git`` at all means "no answer", never an error.
  The root is ``rev-parse --show-toplevel``, the remote ``remote get-url
  origin``, the branch ``branch --show-current``, the default branch
  ``symbolic-ref --short refs/remotes/origin/HEAD`` without ``origin/``.
* **The room of a repository** (:func:`normalize_git_remote`): the remote as
  ``host/owner/repo`` (SSH or URL form, no ``.git``, no trailing ``/``, the
  host lower-cased, all of it lower-cased on ``github.com``). On a branch that
  is not the default one (or, with no known default, not ``main``,
  ``master`` or ``trunk``) the active room is the branch's
  ``git-room:github.com:<owner/repo>:branch:<base64url of the branch>``
  (GitHub remotes only).
* **``.letagents.json``** (``{"room": "<name>"}``) is looked for from the
  directory upwards (at most 50 levels); a ``github.com/owner/repo`` room is
  lower-cased. A file larger than :data:`MAX_CONFIG_BYTES`, unreadable or
  without a ``room`` string counts as no room.
* **Visibility** (:func:`repo_visibility`): the provider's public API, asked
  without credentials (GitHub ``/repos/{owner}/{repo}``: 200 public, 404
  private; GitLab's ``visibility``; Bitbucket's ``is_private``), each within
  :data:`VISIBILITY_TIMEOUT`; anything else is ``unknown``.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Mapping
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import quote, urlsplit

import attrs
import trio

if TYPE_CHECKING:
    import httpx2

__all__ = [
    "CONFIG_FILE",
    "GitRoomContext",
    "config_room",
    "find_config_dir",
    "git_remote_room",
    "git_room_context",
    "git_root",
    "normalize_git_remote",
    "repo_visibility",
]

# The repository's room file.
CONFIG_FILE: Final = ".letagents.json"
# A room file is one short JSON object; anything larger is not one.
MAX_CONFIG_BYTES: Final = 64 * 1024
# Seconds a git command may take: the Node client's 5 s.
GIT_TIMEOUT: Final = 5.0
# Bytes of git output kept (a path, a URL, a branch name).
_MAX_GIT_OUTPUT: Final = 64 * 1024
# Seconds a provider's visibility answer may take: the Node client's 10 s.
VISIBILITY_TIMEOUT: Final = 10.0
# Bytes of a provider's answer read at most: a repository's JSON is a few kilobytes.
MAX_PROVIDER_ANSWER: Final = 256 * 1024
# How far upwards a room file is looked for (the Node client's 50).
_MAX_CONFIG_DEPTH: Final = 50
_LIKELY_DEFAULT_BRANCHES: Final = frozenset({"main", "master", "trunk"})
_SSH_REMOTE: Final = re.compile(r"^[\w-]+@([^:]+):(.+)$")
_GITHUB_ROOM: Final = re.compile(r"^github\.com/([^/:\s]+)/([^/:\s]+)$", re.IGNORECASE)


async def _git(args: list[str], cwd: str) -> str | None:
    """``git <args>``'s trimmed output in ``cwd``, or None (failure, timeout, no git)."""
    with trio.move_on_after(GIT_TIMEOUT):
        try:
            done = await trio.run_process(
                ["git", *args],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        except OSError:
            return None
        if done.returncode != 0:
            return None
        text = done.stdout[:_MAX_GIT_OUTPUT].decode("utf-8", errors="replace").strip()
        return text or None
    return None


async def git_root(cwd: str) -> str | None:
    """The top of the git work tree holding ``cwd``, or None."""
    return await _git(["rev-parse", "--show-toplevel"], cwd)


def normalize_git_remote(url: str) -> str:
    """A remote URL as its room name, ``host/owner/repo`` (see the module docstring)."""
    normalized = url.strip()
    ssh = _SSH_REMOTE.match(normalized)
    if ssh:
        normalized = f"{ssh[1]}/{ssh[2]}"
    else:
        parts = urlsplit(normalized)
        if parts.scheme and parts.hostname:
            normalized = f"{parts.hostname}/{parts.path.lstrip('/')}"
    normalized = normalized.removesuffix(".git").rstrip("/")
    host, sep, rest = normalized.partition("/")
    host = host.lower()
    joined = f"{host}{sep}{rest}"
    return joined.lower() if host == "github.com" else joined


async def git_remote_room(cwd: str) -> str | None:
    """The room of ``cwd``'s ``origin`` remote, or None."""
    remote = await _git(["remote", "get-url", "origin"], cwd)
    return None if remote is None else normalize_git_remote(remote)


@final
@attrs.frozen(kw_only=True)
class GitRoomContext:
    """The rooms a repository's remote and branch point at.

    Attributes:
        repo_room: the repository's room (``host/owner/repo``), if it has a remote.
        current_branch: the checked-out branch, if any.
        default_branch: the remote's default branch, if known.
        active_ref_room: the branch's room, when the branch is not the default one.
        active_room: the branch's room, else the repository's.
        active_room_kind: ``"branch"``, ``"repo"``, or None.
    """

    repo_room: str | None
    current_branch: str | None
    default_branch: str | None
    active_ref_room: str | None
    active_room: str | None
    active_room_kind: str | None


def _branch_room(repo_room: str, branch: str) -> str | None:
    parts = repo_room.strip().rstrip("/").split("/")
    if len(parts) != 3 or parts[0].lower() != "github.com" or not all(parts[1:]):
        return None
    encoded = base64.urlsafe_b64encode(branch.encode("utf-8")).decode("ascii").rstrip("=")
    return f"git-room:github.com:{parts[1].lower()}/{parts[2].lower()}:branch:{encoded}"


def room_context(
    repo_room: str | None, current_branch: str | None, default_branch: str | None
) -> GitRoomContext:
    """The active room of a repository's room on a branch (the module docstring's rule)."""
    current = (current_branch or "").strip() or None
    default = (default_branch or "").strip() or None
    on_side_branch = bool(
        repo_room
        and current
        and (current != default if default else current not in _LIKELY_DEFAULT_BRANCHES)
    )
    ref_room = (
        _branch_room(repo_room, current) if on_side_branch and repo_room and current else None
    )
    return GitRoomContext(
        repo_room=repo_room,
        current_branch=current,
        default_branch=default,
        active_ref_room=ref_room,
        active_room=ref_room or repo_room,
        active_room_kind="branch" if ref_room else ("repo" if repo_room else None),
    )


async def git_branches(cwd: str) -> tuple[str | None, str | None]:
    """``cwd``'s current branch and its remote's default branch."""
    current = await _git(["branch", "--show-current"], cwd)
    origin_head = await _git(
        ["symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD"], cwd
    )
    default = origin_head.removeprefix("origin/") or None if origin_head else None
    return current, default


async def git_room_context(cwd: str) -> GitRoomContext:
    """The rooms ``cwd``'s remote and branch point at."""
    current, default = await git_branches(cwd)
    return room_context(await git_remote_room(cwd), current, default)


def find_config_dir(start: str) -> Path | None:
    """The nearest directory from ``start`` upwards that holds a room file."""
    try:
        here = Path(start).resolve()
    except (OSError, RuntimeError):
        return None
    for depth, directory in enumerate((here, *here.parents)):
        if depth >= _MAX_CONFIG_DEPTH:
            break
        if (directory / CONFIG_FILE).is_file():
            return directory
    return None


def read_config(path: Path) -> Any:
    """A room file's JSON, ``"<parse error>"`` when it is not JSON, None when unreadable."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_CONFIG_BYTES:
        return "<parse error>"
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return "<parse error>"


def config_room(start: str) -> str | None:
    """The room ``.letagents.json`` names for ``start`` (the nearest file upwards), or None."""
    directory = find_config_dir(start)
    parsed = None if directory is None else read_config(directory / CONFIG_FILE)
    room = parsed.get("room") if isinstance(parsed, Mapping) else None
    if not isinstance(room, str) or not room.strip():
        return None
    github = _GITHUB_ROOM.match(room.strip())
    return f"github.com/{github[1].lower()}/{github[2].lower()}" if github else room.strip()


_PROVIDERS: Final = {"github.com": "github", "gitlab.com": "gitlab", "bitbucket.org": "bitbucket"}


async def repo_visibility(
    canonical_key: str, *, transport: httpx2.AsyncBaseTransport | None = None
) -> dict[str, Any]:
    """Whether the repository ``canonical_key`` is public, asked of its provider.

    Returns the Node client's result: ``canonicalKey``, ``provider``,
    ``visibility``, ``accessMode`` (the same), ``roomType`` (``discoverable``
    for public, else ``invite``) and ``error`` when it could not tell.

    Cancellation:
        A checkpoint; the request is closed with it.
    """
    host, _, path = canonical_key.partition("/")
    provider = _PROVIDERS.get(host.lower(), "unknown")
    owner, _, repo = path.partition("/")
    if provider == "unknown" or not owner or not repo:
        await trio.lowlevel.checkpoint()
        error = (
            f"Unknown git provider for host: {host}"
            if provider == "unknown"
            else f"Could not extract owner/repo from: {canonical_key}"
        )
        return _visibility(canonical_key, provider, "unknown", error)
    visibility = await _ask_provider(provider, owner, repo, transport)
    unsure = "Could not determine visibility — treating Git Room access as private/unknown"
    return _visibility(
        canonical_key, provider, visibility, unsure if visibility == "unknown" else None
    )


def _visibility(key: str, provider: str, visibility: str, error: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "canonicalKey": key,
        "provider": provider,
        "visibility": visibility,
        "accessMode": visibility,
        "roomType": "discoverable" if visibility == "public" else "invite",
    }
    if error is not None:
        result["error"] = error
    return result


async def _ask_provider(
    provider: str, owner: str, repo: str, transport: httpx2.AsyncBaseTransport | None
) -> str:
    import httpx2

    urls = {
        "github": f"https://api.github.com/repos/{quote(owner, safe='')}/{quote(repo, safe='')}",
        "gitlab": f"https://gitlab.com/api/v4/projects/{quote(f'{owner}/{repo}', safe='')}",
        "bitbucket": (
            f"https://api.bitbucket.org/2.0/repositories/{quote(owner, safe='')}/"
            f"{quote(repo, safe='')}"
        ),
    }
    headers = {"User-Agent": "letagents-trio", "Accept": "application/json"}
    with trio.move_on_after(VISIBILITY_TIMEOUT):
        try:
            async with (
                httpx2.AsyncClient(transport=transport, timeout=None) as http,
                http.stream("GET", urls[provider], headers=headers) as response,
                aclosing(response.aiter_bytes()) as chunks,
            ):
                content = bytearray()
                async for chunk in chunks:
                    content += chunk
                    if len(content) > MAX_PROVIDER_ANSWER:  # no answer of theirs is this long
                        return "unknown"
                return _visibility_of(provider, response.status_code, bytes(content))
        except httpx2.HTTPError:
            return "unknown"
    return "unknown"


def _visibility_of(provider: str, status: int, content: bytes) -> str:
    if status == 404:
        return "private"
    if provider == "github":
        return "public" if status == 200 else "unknown"
    if not 200 <= status < 300:
        return "unknown"
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return "unknown"
    if provider == "gitlab" and isinstance(data, dict):
        shown = data.get("visibility")
        return (
            "public"
            if shown == "public"
            else "private"
            if shown in ("internal", "private")
            else "unknown"
        )
    if isinstance(data, dict) and isinstance(data.get("is_private"), bool):
        return "private" if data["is_private"] else "public"
    return "unknown"
