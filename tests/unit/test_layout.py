"""Dependencies point one way: ticker, worker and ops import fleet; fleet imports none of them;
ticker and worker never import each other."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("fleet.ticker", "fleet.worker", "fleet.ops")
FORBIDDEN = {
    "fleet": set(ROLES),
    "fleet.ticker": {"fleet.worker", "fleet.ops"},
    "fleet.worker": {"fleet.ticker", "fleet.ops"},
}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_dependencies_point_one_way() -> None:
    bad = []
    for package, forbidden in FORBIDDEN.items():
        for f in (ROOT / package).rglob("*.py"):
            wrong = imported_packages(f) & forbidden
            if wrong:
                bad.append(f"{f.relative_to(ROOT)} imports {sorted(wrong)}")
    assert not bad, bad


def test_no_grab_bag_modules() -> None:
    names = {"utils.py", "common.py", "helpers.py", "misc.py"}
    assert not [p for pkg in ("fleet", "ticker", "worker", "ops") for p in (ROOT / pkg).rglob("*.py") if p.name in names]
