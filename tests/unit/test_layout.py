"""Dependencies point one way: the roles (fleet.ticker, fleet.worker, fleet.ops, fleet.alert) import
the core; the core imports none of them; ticker, worker and alert never import each other; and no
module imports itself back through others (no import circles), in the package or in the load test."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("fleet.ticker", "fleet.worker", "fleet.ops", "fleet.alert")


def modules() -> dict[str, Path]:
    """Every module of fleet and of the load test, by dotted name."""
    found = {}
    for package in ("fleet", "loadtest"):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `path` imports, anywhere in it (in a function too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(known)
            # `from fleet import logs` imports fleet.logs; `from fleet.db import connect`, fleet.db
            found |= subs if len(subs) == len(node.names) else subs | ({node.module} & set(known))
    return found


def role_of(module: str) -> str:
    return next((r for r in ROLES if module == r or module.startswith(r + ".")), "core")


FORBIDDEN = {
    "core": set(ROLES),
    "fleet.ticker": {"fleet.worker", "fleet.ops", "fleet.alert"},
    "fleet.worker": {"fleet.ticker", "fleet.ops", "fleet.alert"},
    "fleet.alert": {"fleet.ticker", "fleet.worker", "fleet.ops"},
}


def test_dependencies_point_one_way() -> None:
    known = modules()
    assert "fleet.worker.loop" in known and "fleet.ops.cli" in known  # the walk sees the roles
    bad = []
    for name, path in known.items():
        if not name.startswith("fleet"):
            continue
        wrong = {role_of(m) for m in imports(path, known)} & FORBIDDEN.get(role_of(name), set())
        if wrong:
            bad.append(f"{name} imports {sorted(wrong)}")
    assert not bad, bad


def cycles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(v: str) -> Iterator[list[str]]:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                yield from visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                yield sorted(component)

    for v in sorted(graph):
        if v not in index:
            yield from visit(v)


def test_no_import_circles() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    assert list(cycles({"a": {"b"}, "b": {"a"}, "c": set()})) == [["a", "b"]]  # the check can fail
    assert list(cycles(graph)) == []


def test_no_grab_bag_modules() -> None:
    names = {"utils.py", "common.py", "helpers.py", "misc.py"}
    assert not [p for p in (ROOT / "fleet").rglob("*.py") if p.name in names]
