"""The load test's named SQL statements and its schema, read once from the `.sql` files beside this module."""

from __future__ import annotations

from importlib import resources

from fleet.store.queries import parse_statements

STATEMENTS: dict[str, str] = parse_statements(
    resources.files("loadtest").joinpath("queries.sql").read_text(encoding="utf-8")
)
SCHEMA: str = resources.files("loadtest").joinpath("schema.sql").read_text(encoding="utf-8")


def q(name: str) -> str:
    """The text of the named statement (a KeyError names an unknown one)."""
    return STATEMENTS[name]
