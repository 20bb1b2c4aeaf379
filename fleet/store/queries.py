"""Named SQL statements, loaded once from the `.sql` files beside this module."""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_]+)\s*$", re.MULTILINE)


def parse_statements(text: str, statements: dict[str, str] | None = None) -> dict[str, str]:
    """The `-- name: x` statements of one `.sql` text, added to `statements` (a name may not repeat)."""
    found = {} if statements is None else statements
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise RuntimeError(f"SQL statement {name!r} is defined twice")
        found[name] = compact(body)
    return found


_OPERATOR = re.compile(r" (<>|<=|>=|\+) (?![-+])")


def compact(sql: str) -> str:
    """The statement without its comment lines and indentation, and without the spaces after a
    comma and around `=`, `<>`, `<=`, `>=` and `+` outside string literals (not before a sign,
    which would join the operator: PostgreSQL reads `<=-1` as `<=` then `-1`, but a run of
    operator characters can take a trailing sign into one operator).

    Comments stay in the files; what is sent is short enough (under 4 kB) for psycopg to keep its
    conversion of the placeholders instead of parsing the text again at every execution. The
    statements have no comment after code on a line, and none inside a string.
    """
    lines = (line.strip() for line in sql.splitlines())
    text = "\n".join(line for line in lines if line and not line.startswith("--"))
    parts = text.split("'")
    for i in range(0, len(parts), 2):  # the even parts lie outside string literals ('' included)
        parts[i] = _OPERATOR.sub(r"\1", parts[i].replace(", ", ",").replace(" = ", "="))
    return "'".join(parts)


def _load() -> dict[str, str]:
    statements: dict[str, str] = {}
    for entry in sorted(resources.files("fleet").joinpath("sql").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            parse_statements(entry.read_text(encoding="utf-8"), statements)
    return statements


STATEMENTS: dict[str, str] = _load()


def q(name: str) -> str:
    """The text of the named statement (a KeyError names an unknown one)."""
    return STATEMENTS[name]
