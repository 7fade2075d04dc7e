"""Name keys, codenames, labels and allocation (PROTOCOL.md §5.4)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from letagents_trio.workers._names import (
    AGENT_CODENAME_SPACE,
    CODENAME_WORDS,
    MAX_DISPLAY_NAME_COLLISION_OFFSET,
    Codename,
    actor_label,
    allocate_name,
    allocation_base,
    allocation_candidates,
    codename,
    fold,
    is_durable_worker_id,
    is_generic_name,
    name_key,
    normalize_ide_label,
    owner_attribution,
    routing_handle,
    routing_sender,
)

# --- keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_", "expected"),
    [
        ("FieldMeadow", "fieldmeadow"),
        ("ABCXYZ abcxyz 09", "abcxyz abcxyz 09"),
        ("ÀÉÎ Straße", "ÀÉÎ straße"),  # only ASCII A-Z fold
        ("", ""),
    ],
)
def test_fold_lowercases_ascii_letters_only(given_: str, expected: str) -> None:
    assert fold(given_) == expected


@pytest.mark.parametrize(
    ("given_", "expected"),
    [
        ("  Field   Meadow  ", "field meadow"),
        ("Field\t\n Meadow", "field meadow"),
        ("Field\u00a0\u3000Meadow", "field meadow"),  # JS \s includes NBSP, ideographic space
        ("\ufeffField\ufeff", "field"),  # JS trim strips the BOM
        ("Field\x1fMeadow", "field\x1fmeadow"),  # not JS whitespace, though str.isspace
        ("Émile Zola", "Émile zola"),
    ],
)
def test_routing_sender_trims_folds_and_collapses_whitespace(given_: str, expected: str) -> None:
    assert routing_sender(given_) == expected


@pytest.mark.parametrize(
    ("given_", "expected"),
    [
        ("Field Meadow", "fieldmeadow"),
        ("  a_b.c:d/e-f  ", "a_b.c:d/e-f"),
        ("Río! @Bob #1", "robob1"),
        ("日本語", ""),
    ],
)
def test_routing_handle_keeps_only_handle_characters(given_: str, expected: str) -> None:
    assert routing_handle(given_) == expected


def test_name_key_makes_case_and_spacing_variants_the_same_name() -> None:
    assert name_key("FieldMeadow") == name_key("fieldmeadow") == name_key("Field Meadow")
    assert name_key("FieldMeadow") == "fieldmeadow"


def test_name_key_keeps_a_number_suffix_a_different_name() -> None:
    assert name_key("FieldMeadow 1") != name_key("FieldMeadow")
    assert name_key("FieldMeadow 1") == "fieldmeadow1"


def test_name_key_falls_back_to_the_sender_form_when_the_handle_is_empty() -> None:
    assert name_key("  日本  語 ") == "日本 語"
    assert name_key("日本 語") == name_key("日本   語")


@pytest.mark.parametrize(
    ("given_", "expected"),
    [
        ("worker_" + "0123456789abcdef" * 2, True),
        ("worker_" + "0123456789ABCDEF" * 2, False),  # lower-case hex only
        ("worker_" + "0" * 31, False),
        ("worker_" + "0" * 33, False),
        ("worker_" + "g" * 32, False),
        (" worker_" + "0" * 32, False),
        ("worker_" + "0" * 32 + "\n", False),
        ("instance-1", False),
        ("", False),
        (None, False),
    ],
)
def test_is_durable_worker_id_is_worker_and_32_lowercase_hex(
    given_: str | None, expected: bool
) -> None:
    assert is_durable_worker_id(given_) is expected


# --- codenames -------------------------------------------------------------------


def test_codename_word_list_has_102_words_in_upstream_order() -> None:
    assert len(CODENAME_WORDS) == 102
    assert len(set(CODENAME_WORDS)) == 102
    assert AGENT_CODENAME_SPACE == 10_404
    assert CODENAME_WORDS[0] == "amber"
    assert CODENAME_WORDS[16] == "crest"  # after "crisp": not alphabetical
    assert CODENAME_WORDS[23] == "field"
    assert CODENAME_WORDS[49] == "meadow"
    assert CODENAME_WORDS[68] == "river"
    assert CODENAME_WORDS[89] == "valley"
    assert CODENAME_WORDS[101] == "wren"
    assert list(CODENAME_WORDS) != sorted(CODENAME_WORDS)


def test_codename_is_the_sha256_prefix_index_split_into_two_words() -> None:
    # sha256("") starts e3b0c442: 0xE3B0C442 % 10404 == 7142 == 70 * 102 + 2.
    assert int.from_bytes(hashlib.sha256(b"").digest()[:4], "big") % 10_404 == 7142
    assert CODENAME_WORDS[70] == "sage"
    assert CODENAME_WORDS[2] == "autumn"
    assert codename("") == Codename(display_name="SageAutumn", slug="sageautumn")


@pytest.mark.parametrize(
    ("key", "display_name"),
    [
        ("alice/claude-code", "OakQuiet"),
        ("owner:agent:1", "DuneBrook"),
        ("ünïcødé", "GardenWolf"),
        ("abc:1", "StarBay"),
        ("abc:2", "OwlWarm"),
    ],
)
def test_codename_is_deterministic(key: str, display_name: str) -> None:
    assert codename(key).display_name == display_name
    assert codename(key).slug == display_name.lower()
    assert codename(key) == codename(key)


def test_codename_offset_moves_the_index_and_wraps_both_ways() -> None:
    assert codename("", 1) == Codename(display_name="SageBadger", slug="sagebadger")
    assert codename("", -1) == Codename(display_name="SageAnchor", slug="sageanchor")
    assert codename("", AGENT_CODENAME_SPACE) == codename("")
    assert codename("", -AGENT_CODENAME_SPACE) == codename("")
    # 7142 + 3262 == 10404 wraps to index 0.
    assert codename("", 3262) == Codename(display_name="AmberAmber", slug="amberamber")
    assert codename("", 3261) == Codename(display_name="WrenWren", slug="wrenwren")


_NODE_KEYS = ["", "alice/claude-code", "owner:agent:1", "ünïcødé", "abc:1", "😀 emoji", "a" * 300]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")
def test_codename_index_matches_nodes_crypto() -> None:
    script = (
        "const c = require('crypto');"
        "for (const k of JSON.parse(process.argv[1]))"
        "  console.log(c.createHash('sha256').update(k, 'utf8').digest().readUInt32BE(0) % 10404);"
    )
    node = shutil.which("node")
    assert node is not None
    result = subprocess.run(
        [node, "-e", script, json.dumps(_NODE_KEYS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    indices = [int(line) for line in result.stdout.split()]
    assert len(indices) == len(_NODE_KEYS)
    from_node = [
        Codename(
            display_name=CODENAME_WORDS[i // 102].title() + CODENAME_WORDS[i % 102].title(),
            slug=CODENAME_WORDS[i // 102] + CODENAME_WORDS[i % 102],
        )
        for i in indices
    ]
    assert [codename(k) for k in _NODE_KEYS] == from_node


_WORD_PAIRS = {w1 + w2 for w1 in CODENAME_WORDS for w2 in CODENAME_WORDS}


@given(st.text(), st.integers(min_value=-(10**9), max_value=10**9))
def test_codename_is_always_a_well_formed_pair_of_words(key: str, offset: int) -> None:
    name = codename(key, offset)
    assert name.slug in _WORD_PAIRS
    assert name.display_name.lower() == name.slug
    assert name.display_name.isascii()
    assert name.display_name.isalpha()
    capitals = [i for i, ch in enumerate(name.display_name) if ch.isupper()]
    assert len(capitals) == 2
    assert capitals[0] == 0
    first = name.display_name[: capitals[1]].lower()
    second = name.display_name[capitals[1] :].lower()
    assert first in CODENAME_WORDS
    assert second in CODENAME_WORDS


@given(st.text(), st.integers(min_value=-(10**9), max_value=10**9))
def test_codename_offset_is_modular(key: str, offset: int) -> None:
    assert codename(key, offset) == codename(key, offset % AGENT_CODENAME_SPACE)
    assert codename(key, offset) == codename(key, offset + AGENT_CODENAME_SPACE)


# --- labels ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_", "expected"),
    [
        ("agent", "Agent"),
        ("antigravity", "Antigravity"),
        ("claude", "Claude"),
        ("claude-code", "Claude Code"),
        ("Claude Code", "Claude Code"),
        ("claude_code", "Claude Code"),
        ("CODEX", "Codex"),
        ("cursor", "Cursor"),
        ("open-model", "Open Model"),
        ("opencode", "OpenCode"),
        ("OpenCode", "OpenCode"),
        ("orchestrator", "Orchestrator"),
        ("windsurf", "Windsurf"),
        ("my-IDE_thing", "My Ide Thing"),
        ("  zed  ", "Zed"),
        ("", "Agent"),
        ("   ", "Agent"),
        (None, "Agent"),
    ],
)
def test_normalize_ide_label_maps_known_labels_else_title_case(
    given_: str | None, expected: str
) -> None:
    assert normalize_ide_label(given_) == expected


@pytest.mark.parametrize(
    ("owner", "expected"),
    [
        ("Alice", "Alice's agent"),
        ("James", "James' agent"),
        ("JAMES", "JAMES' agent"),
        (" Bob ", "Bob's agent"),
        ("Max", "Max's agent"),
    ],
)
def test_owner_attribution_drops_the_s_after_a_final_s(owner: str, expected: str) -> None:
    assert owner_attribution(owner) == expected


@pytest.mark.parametrize(
    ("display", "owner", "ide", "expected"),
    [
        ("RiverValley", "Alice", "claude-code", "RiverValley | Alice's agent | Claude Code"),
        ("RiverValley", "James", "codex", "RiverValley | James' agent | Codex"),
        ("Scout", "Bo", None, "Scout | Bo's agent | Agent"),
        ("Scout", "Bo", "windsurf", "Scout | Bo's agent | Windsurf"),
        ("Scout", "  ", "cursor", "Scout | Cursor"),
    ],
)
def test_actor_label_is_display_owner_attribution_and_ide(
    display: str, owner: str, ide: str | None, expected: str
) -> None:
    assert actor_label(display, owner, ide) == expected


@pytest.mark.parametrize(
    ("display", "ide", "expected"),
    [
        ("", "cursor", True),
        ("   ", None, True),
        (None, None, True),
        ("Claude", None, True),
        ("claude-worker", None, True),
        ("Local_Agent", None, True),
        ("Codex Agent", "codex", True),
        ("cline roo cursor antigravity", None, True),
        ("Claude Code", "claude-code", True),  # "code" is a token of the IDE label
        ("Claude Code", None, False),  # "code" is not generic on its own
        ("OpenCode", "opencode", True),
        ("Windsurf", "windsurf", True),
        ("Windsurf agent", "Windsurf", True),
        ("Scout", "claude-code", False),
        ("Claude Scout", "claude-code", False),
        ("FieldMeadow", None, False),
        ("agent 2", None, False),
        ("xxxx", None, False),  # no IDE label adds no word of its own
    ],
)
def test_is_generic_name_when_every_token_names_only_the_runtime(
    display: str | None, ide: str | None, expected: bool
) -> None:
    assert is_generic_name(display, ide) is expected


def test_allocation_base_replaces_a_generic_name_by_the_agents_codename() -> None:
    assert allocation_base("claude", "claude-code", "alice/claude-code") == "OakQuiet"
    assert allocation_base("", None, "alice/claude-code") == "OakQuiet"
    assert allocation_base(None, None, "alice/claude-code") == "OakQuiet"
    assert allocation_base("  Scout ", "claude-code", "alice/claude-code") == "Scout"


# --- allocation ------------------------------------------------------------------


def test_allocation_candidates_are_the_base_then_keyed_codenames() -> None:
    names = list(allocation_candidates("Scout", "abc", max_offset=2))
    assert names == ["Scout", "StarBay", "OwlWarm"]
    assert len(list(allocation_candidates("Scout", "abc"))) == MAX_DISPLAY_NAME_COLLISION_OFFSET + 1


def test_allocate_name_gives_the_base_when_it_is_free() -> None:
    assert allocate_name("Scout", "abc", lambda name: False) == "Scout"


def test_allocate_name_gives_a_codename_never_a_number_suffix() -> None:
    held = {name_key("Scout")}
    assert allocate_name("scout", "abc", lambda name: name_key(name) in held) == "StarBay"


def test_allocate_name_skips_held_codenames_in_offset_order() -> None:
    held = {name_key("Scout"), name_key("Star Bay")}
    assert allocate_name("Scout", "abc", lambda name: name_key(name) in held) == "OwlWarm"


def test_allocate_name_codename_differs_per_agent_key() -> None:
    def held(name: str) -> bool:
        return name == "Scout"

    assert allocate_name("Scout", "abc", held) != allocate_name("Scout", "abd", held)


def test_allocate_name_returns_none_when_the_whole_scan_is_held() -> None:
    asked: list[str] = []

    def held(name: str) -> bool:
        asked.append(name)
        return True

    assert allocate_name("Scout", "abc", held) is None
    assert len(asked) == MAX_DISPLAY_NAME_COLLISION_OFFSET + 1
    assert asked[-1] == codename("abc:1024").display_name


def test_allocate_name_honours_max_offset() -> None:
    assert allocate_name("Scout", "abc", lambda name: name != "OwlWarm", max_offset=1) is None
    assert allocate_name("Scout", "abc", lambda name: name != "OwlWarm", max_offset=2) == "OwlWarm"
