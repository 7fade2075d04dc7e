"""The payload a board intent names, in the letagents API's shapes (``board-intent-payloads``).

A governed room approves an exact action: the intent carries the action's
payload, and the room rebuilds the payload from the action when it is made and
compares the two (by the SHA-256 of their canonical JSON). So the two sides
must build it alike: the MCP tools register typed intents with these
functions, and the reference room rebuilds actions' payloads with them.
Creation fields are trimmed (blank is null); every other field is as given.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_intent_payload", "lease_intent_payload", "mutation_intent_payload"]


def _trimmed(value: str | None) -> str | None:
    return None if value is None else value.strip() or None


def create_intent_payload(
    title: str, description: str | None, source_message_id: str | None
) -> dict[str, Any]:
    """A task creation's payload: the fields ``add_task`` sends, trimmed (blank: null)."""
    return {
        "title": title.strip(),
        "description": _trimmed(description),
        "source_message_id": _trimmed(source_message_id),
    }


def mutation_intent_payload(
    task_id: str,
    *,
    status: str | None = None,
    assignee: str | None = None,
    assignee_agent_key: str | None = None,
    pr_url: str | None = None,
) -> dict[str, Any]:
    """A task move's payload: a claim (``assigned`` to this worker's label and agent key),
    a close (``merged``, ``done`` or ``cancelled``, with its PR link), a reopen."""
    return {
        "task_id": task_id,
        "status": status,
        "assignee": assignee,
        "assignee_agent_key": assignee_agent_key,
        "pr_url": pr_url,
    }


def lease_intent_payload(
    task_id: str,
    action: str,
    lease_id: str | None,
    target_agent_key: str | None = None,
    target_agent_session_id: str | None = None,
) -> dict[str, Any]:
    """A work-lease release's or handoff's payload, naming the lease it acts on."""
    return {
        "task_id": task_id,
        "action": action,
        "lease_id": lease_id,
        "target_actor_key": target_agent_key,
        "target_agent_session_id": target_agent_session_id,
    }
