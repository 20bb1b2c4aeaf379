"""Dependencies point one way: the roles (fleet.ticker, fleet.worker, fleet.ops, fleet.alert) import
the core; the core imports none of them; ticker, worker and alert never import each other; the core's
parts stand in layers, each importing only those below it; and no module imports itself back through
others (no import circles), in the package or in the load test. Each module has a name of its own: none
of the core's names is used again in the core or in a role, and fleet/ itself holds only the public API
beside its subpackages."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("fleet.ticker", "fleet.worker", "fleet.ops", "fleet.alert")
# The core's parts, lowest first: each imports only parts before it. A subpackage counts as one part.
CORE_LAYERS = (
    "fleet.errors",  # the exceptions a user is told
    "fleet.observe",  # what a process tells: logs, printed text, traces
    "fleet.timing",  # schedules and timing, the schedules file
    "fleet.store",  # the database: connections, pools, migrations, statements, shared chores
    "fleet.declare",  # schedules declared in code (public API)
    "fleet.jobs",  # job registration and a handler's context (public API)
    "fleet.health",  # the reading side: verdicts, roll-up, runs, the slot ledger, typed records
    "fleet.admin",  # an operator's changes: apply, repairs, the audit trail, alert routes
    "fleet.process",  # running fleet's processes: settings, signals, supervisord, command jobs
    "fleet.client",  # fleet.Client (public API)
    "fleet",  # the package itself: the public API's names, imported on first use
)
# What fleet/ holds itself: the public API's modules, and the subpackages.
TOP_MODULES = {"__init__", "client", "declare", "errors", "jobs"}
SUBPACKAGES = {
    "ticker",
    "worker",
    "ops",
    "alert",
    "timing",
    "observe",
    "store",
    "health",
    "admin",
    "process",
} | {"examples"}


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
            # `from fleet import logs` imports fleet.observe.logs; `from fleet.store.db import connect`, fleet.store.db
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


def part_of(module: str) -> str:
    """The core part (CORE_LAYERS) a module of the core belongs to: its subpackage, or itself."""
    return next((p for p in CORE_LAYERS if module == p or module.startswith(p + ".")), "fleet")


def upward(imported: dict[str, set[str]]) -> list[str]:
    """The imports (module: the modules it imports) from a core part to a part above it."""
    order = {p: i for i, p in enumerate(CORE_LAYERS)}
    return [
        f"{name} imports {m} ({part_of(m)} stands above {part_of(name)})"
        for name, ms in imported.items()
        for m in sorted(ms)
        if order[part_of(m)] > order[part_of(name)]
    ]


def test_core_layers_point_down() -> None:
    known = modules()
    core = {
        name: imports(path, known)
        for name, path in known.items()
        if name.startswith("fleet") and role_of(name) == "core" and not name.startswith("fleet.examples")
    }
    assert "fleet.timing.schedule" in core and "fleet.store.db" in core
    assert upward({"fleet.timing.schedule": {"fleet.store.db"}}) != []  # the check can fail
    assert upward(core) == []


def shared_names(paths: list[Path]) -> dict[str, list[str]]:
    """The base names that a module of the core shares with another module, of the core or of a role
    (the roles may each have a `cli.py` or a `loop.py`: each is the same job in its own role)."""
    by_name: dict[str, list[str]] = {}
    for path in paths:
        if path.name != "__init__.py":
            by_name.setdefault(path.stem, []).append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return {
        name: sorted(where)
        for name, where in by_name.items()
        if len(where) > 1 and any(role_of(w) == "core" for w in where)
    }


def test_one_name_one_module() -> None:
    fake = [ROOT / "fleet/store/verify.py", ROOT / "fleet/ops/verify.py", ROOT / "fleet/ops/cli.py"]
    assert shared_names(fake + [ROOT / "fleet/ticker/cli.py"]) == {  # the check can fail
        "verify": ["fleet.ops.verify", "fleet.store.verify"]
    }
    assert shared_names(sorted((ROOT / "fleet").rglob("*.py"))) == {}


def test_top_level_holds_the_public_api_and_subpackages() -> None:
    fleet_dir = ROOT / "fleet"
    assert {p.stem for p in fleet_dir.glob("*.py")} == TOP_MODULES
    packages = {p.parent.name for p in fleet_dir.glob("*/__init__.py")}
    assert packages == SUBPACKAGES
