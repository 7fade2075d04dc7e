"""The legacy path's process identity (issue 28 row 7; PROTOCOL §5.8).

The Node client registers a legacy session under an identity of its own
process: the key ``instance:<AGENT_INSTANCE_UUID>`` (``identity/state.ts``),
named with the first codename of that key that the account's agents do not
already have (``identity/names.ts``, ``resolveAgentName``). Ours was one agent
per machine (``agent-<16 hex of the host id>``), so two of our processes were
one actor to the room, and lease adoption keyed on identity crossed them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from letagents_trio.workers._legacy import LegacyRegistrar, process_agent_name
from letagents_trio.workers._names import AGENT_CODENAME_SPACE, codename, normalize_agent_base_name
from letagents_trio.workers._owner import Owner

from .helpers import ROOM, Proc, open_proc, registration_bodies, seed_state

if TYPE_CHECKING:
    from pathlib import Path

    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom


async def test_two_processes_are_two_actors_and_each_keeps_its_own(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """Node ``identity/state.ts``: one identity per process, ``instance:<uuid>``, made
    once and kept: a second legacy registration of the same process names the same
    actor and replaces its session; another process is another actor."""
    await seed_state(state_path)
    async with (
        open_proc(fake_room.transport, state_path) as first,
        open_proc(fake_room.transport, state_path) as second,
    ):
        one = await first.handles.register_legacy(room_id=ROOM)
        again = await first.handles.register_legacy(room_id=ROOM)
        other = await second.handles.register_legacy(room_id=ROOM)
    bodies = registration_bodies(fake_room)
    keys = [body["actor_key"] for body in bodies]
    instances = [body["agent_instance_id"] for body in bodies]
    assert keys[0] == keys[1] != keys[2]
    assert instances[0] == instances[1] != instances[2]
    assert keys[0] == f"owner/{codename(f'instance:{instances[0]}').slug}"
    assert bodies[1]["replace_agent_session_id"] == one.session.session_id
    assert other.session.display_name != again.session.display_name
    # Each process made its identity once (its account, its agents' names, its own).
    asked = [r.path for r in fake_room.requests if r.path in ("/agents/me", "/agents")]
    assert asked == ["/agents/me", "/agents/me", "/agents"] * 2
    assert len(bodies) == 3


async def register(p: Proc, instance_id: str) -> None:
    """One legacy registration in ROOM by a registrar of the instance ``instance_id``."""
    registrar = LegacyRegistrar(
        client=p.client,
        state=p.store,
        runtime_label="python",
        ide_label="Agent",
        instance_id=instance_id,
    )
    owner = Owner.signed_in(p.client.api_url, "owner")
    await registrar.register(
        owner, ROOM, local=False, session_kind="worker", display_name=None, runtime=None, cwd=None
    )


async def test_a_name_the_accounts_agents_have_is_passed_over(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """Node ``resolveAgentName``: the first codename of the key (offset 0, 1, …) that
    no agent of the account (``GET /agents/me``) has."""
    await seed_state(state_path)
    taken = codename("instance:fixed")
    async with open_proc(fake_room.transport, state_path) as p:
        await p.client.call("POST", "/agents", json={"name": taken.display_name})
        await register(p, "fixed")
    (body,) = registration_bodies(fake_room)
    assert body["actor_key"] == f"owner/{codename('instance:fixed', 1).slug}"


async def test_an_account_directory_that_fails_takes_the_first_codename(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """Node ``getAuthenticatedAgentDirectory`` answers null on any failure: offset 0."""
    await seed_state(state_path)
    fake_room.on("GET", "/agents/me").respond(503, {"error": "down"})
    async with open_proc(fake_room.transport, state_path) as p:
        await register(p, "fixed")
    (body,) = registration_bodies(fake_room)
    assert body["actor_key"] == f"owner/{codename('instance:fixed').slug}"


def test_every_codename_taken_falls_back_to_a_hashed_suffix() -> None:
    """Node ``resolveAgentName``'s fallback: the first codename plus four hex digits."""
    key = "instance:fixed"
    taken = frozenset(codename(key, k).slug for k in range(AGENT_CODENAME_SPACE))
    name = process_agent_name(key, taken)
    first = codename(key)
    assert name.slug.startswith(first.slug + "-")
    assert len(name.slug) == len(first.slug) + 5
    assert name.display_name == f"{first.display_name} {name.slug[-4:].upper()}"


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("RiverValley", "rivervalley"),
        ("  My Agent  ", "my"),
        ("Élan--Vital", "elan-vital"),
        ("agent", "agent"),
        ("---", "agent"),
        ("日本", "agent"),
    ],
)
def test_agent_names_are_compared_as_the_directory_does(raw: str, normalized: str) -> None:
    """``normalizeAgentBaseName`` (``shared/codenames.ts``)."""
    assert normalize_agent_base_name(raw) == normalized
