"""Alternate variants of a scale benchmark row by row (A, B, A, B), keeping every run.

A variant is a tree holding ``bench/`` and ``letagents_trio/`` (a worktree, or
a copy with a change applied); its own ``bench/PROGRAM`` runs, so its own
package is measured (the benchmarks put their tree first on ``PYTHONPATH``).
For each session count, case and client, every variant runs once in turn,
``--reps`` times, each run one row of PROGRAM with ``--retries 0`` (a row
skewed by other load is kept and shows it, never replaced by a better one).
The host's state comes with each row (``host_busy_before``, ``foreign_cpu_s``).

    python bench/alternate.py --program bench_vs_node.py \\
        --variant before=/path/to/tree-a --variant after=/path/to/tree-b \\
        [--variant plain=/path/to/tree-a@+-plain] [--env after:NAME=VALUE] \\
        --sessions 3000 10000 [--clients py,py-ws] [--cases healthy] [--reps 2] \\
        [--jsonl FILE] [-- options for PROGRAM, e.g. --quiet-within 60]

``NAME=TREE@+SUFFIX`` appends SUFFIX to each client's name (``py`` becomes
``py-plain``); ``NAME=TREE@=CLIENT`` replaces it. ``--env NAME:KEY=VALUE`` sets
an environment variable for one variant's runs. ``--cases`` is for programs
that take it (bench_vs_node.py). Prints each run as it ends, then a table of
every run with the change of each variant's medians against the first
variant's; ``--jsonl`` appends every row (PROGRAM's JSON, with ``variant`` and
``rep``). Every run is bounded (``--run-bound``, seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

# (column, JSON field, scale, digits)
COLUMNS = (
    ("all open s", "open_s", 1.0, 2),
    ("RSS held MiB", "rss_held", 1 / 2**20, 0),
    ("idle CPU s", "idle_cpu_s", 1.0, 3),
    ("gone s", "gone_s", 1.0, 2),
    ("exit CPU s", "exit_cpu_s", 1.0, 2),
    ("exits", "exits", 1.0, 0),
)


@dataclass(frozen=True)
class Variant:
    name: str
    tree: Path
    client: str  # "", "+SUFFIX" or "=CLIENT"

    def client_for(self, base: str) -> str:
        if self.client.startswith("+"):
            return base + self.client[1:]
        if self.client.startswith("="):
            return self.client[1:]
        return base


def parse_variant(spec: str) -> Variant:
    name, sep, rest = spec.partition("=")
    tree, _, client = rest.partition("@")
    if not sep or not name or not tree or (client and client[0] not in "+="):
        raise argparse.ArgumentTypeError(f"not NAME=TREE[@+SUFFIX|@=CLIENT]: {spec!r}")
    return Variant(name, Path(tree).resolve(), client)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="bench_vs_node.py or bench_vs_room.py")
    parser.add_argument("--variant", type=parse_variant, action="append", required=True)
    parser.add_argument("--env", action="append", default=[], help="NAME:KEY=VALUE")
    parser.add_argument("--sessions", type=int, nargs="+", required=True)
    parser.add_argument("--clients", default="py")
    parser.add_argument("--cases", default="")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--jsonl", type=Path, default=None)
    parser.add_argument("--run-bound", type=float, default=1800.0)
    parser.add_argument("extra", nargs="*", help="after --: options for PROGRAM")
    args = parser.parse_args(argv)
    if len(args.variant) < 2:
        parser.error("give at least two --variant")
    names = {v.name for v in args.variant}
    args.environments = defaultdict(dict)
    for item in args.env:
        name, _, assignment = item.partition(":")
        key, sep, value = assignment.partition("=")
        if name not in names or not key or not sep:
            parser.error(f"--env {item!r}: not NAME:KEY=VALUE for a variant")
        args.environments[name][key] = value
    return args


async def run_once(
    args: argparse.Namespace, variant: Variant, client: str, sessions: int, case: str
) -> dict[str, Any]:
    """One row of PROGRAM in ``variant``'s tree; its JSON row (or a note saying why none)."""
    with tempfile.TemporaryDirectory(prefix="alternate_") as folder:
        out = Path(folder) / "row.json"
        argv = [sys.executable, str(variant.tree / "bench" / args.program), str(sessions)]
        argv += ["--clients", client, "--retries", "0", "--json", str(out)]
        if case:
            argv += ["--cases", case]
        argv += args.extra
        env = {**os.environ, **args.environments[variant.name]}
        with trio.move_on_after(args.run_bound) as scope:
            done = await trio.run_process(
                argv,
                env=env,
                cwd=variant.tree,
                check=False,
                capture_stdout=True,
                capture_stderr=True,
            )
        if scope.cancelled_caught:
            return {"note": f"run over {args.run_bound:.0f} s, stopped"}
        rows = read_rows(out)
    if not rows:
        tail = done.stderr.decode(errors="replace")[-300:]
        return {"note": f"no row (exit status {done.returncode}): {tail}"}
    return rows[0]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows PROGRAM wrote with ``--json`` (none when it wrote nothing)."""
    try:
        rows: list[dict[str, Any]] = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return rows


def append_row(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as sink:
        sink.write(json.dumps(row) + "\n")


def fmt(value: object, scale: float, digits: int) -> str:
    return "—" if not isinstance(value, int | float) else f"{value * scale:.{digits}f}"


def run_line(row: dict[str, Any]) -> str:
    cells = " | ".join(fmt(row.get(field), scale, digits) for _, field, scale, digits in COLUMNS)
    host = f"{fmt(row.get('host_busy_before'), 1, 2)} / {fmt(row.get('foreign_cpu_s'), 1, 1)}"
    return (
        f"| {row.get('sessions')} | {row.get('case')} | {row.get('client')} | {row['variant']} "
        f"| {row['rep']} | {cells} | {host} | {row.get('note', '')} |"
    )


def median(values: Sequence[object]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.median(numbers) if numbers else None


def table(rows: list[dict[str, Any]], variants: list[Variant]) -> str:
    head = " | ".join(name for name, *_ in COLUMNS)
    lines = [
        f"| N | case | client | variant | run | {head} | host busy before / other CPU s | note |",
        "|" + "---|" * (len(COLUMNS) + 7),
    ]
    groups: dict[tuple[object, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["_sessions"], row["_case"], row["_client"])].append(row)
    for (sessions, case, client), group in groups.items():
        lines += [run_line(row) for row in group]
        first = [row for row in group if row["variant"] == variants[0].name]
        for variant in variants[1:]:
            mine = [row for row in group if row["variant"] == variant.name]
            changes = []
            for _, field, _, _ in COLUMNS:
                a = median([row.get(field) for row in first])
                b = median([row.get(field) for row in mine])
                changes.append("—" if not a or b is None else f"{(b / a - 1) * 100:+.0f} %")
            label = f"{variant.name} vs {variants[0].name}, medians"
            cells = " | ".join(changes)
            lines.append(f"| {sessions} | {case} | {client} | {label} | | {cells} |||")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    clients = [c for c in args.clients.split(",") if c]
    cases = [c for c in args.cases.split(",") if c] or [""]
    rows: list[dict[str, Any]] = []
    try:
        for sessions in args.sessions:
            for case in cases:
                for client in clients:
                    for rep in range(1, args.reps + 1):
                        for variant in args.variant:
                            row = await run_once(
                                args, variant, variant.client_for(client), sessions, case
                            )
                            row.update(variant=variant.name, rep=rep)
                            row.update(_sessions=sessions, _case=case, _client=client)
                            rows.append(row)
                            print(run_line(row), flush=True)
                            if args.jsonl:
                                append_row(args.jsonl, row)
    finally:
        print()
        print(table(rows, args.variant))


if __name__ == "__main__":
    trio.run(main, parse(sys.argv[1:]))
