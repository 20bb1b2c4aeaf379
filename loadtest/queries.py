"""The load test's named SQL statements and its schema, read once from the `.sql` files beside this module."""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_]+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    text = resources.files("loadtest").joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    statements: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in statements:
            raise RuntimeError(f"SQL statement {name!r} is defined twice")
        statements[name] = body.strip()
    return statements


STATEMENTS: dict[str, str] = _load()
SCHEMA: str = resources.files("loadtest").joinpath("schema.sql").read_text(encoding="utf-8")


def q(name: str) -> str:
    """The text of the named statement (a KeyError names an unknown one)."""
    return STATEMENTS[name]
