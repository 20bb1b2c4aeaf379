"""Named SQL statements, loaded once from the `.sql` files beside this module."""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_]+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    statements: dict[str, str] = {}
    for entry in sorted(resources.files("fleet").joinpath("sql").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        parts = _HEADER.split(entry.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in statements:
                raise RuntimeError(f"SQL statement {name!r} is defined twice")
            statements[name] = body.strip()
    return statements


STATEMENTS: dict[str, str] = _load()


def q(name: str) -> str:
    """The text of the named statement (a KeyError names an unknown one)."""
    return STATEMENTS[name]
