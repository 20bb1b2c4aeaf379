"""The named statements as they are sent."""

from __future__ import annotations

from fleet.queries import STATEMENTS, compact, parse_statements

# psycopg keeps its conversion of a statement's placeholders only for texts up to this length
# (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH); a longer hot statement is parsed at every execution.
PSYCOPG_CACHED_LENGTH = 4096


def test_every_statement_is_short_enough_for_psycopg_to_cache() -> None:
    too_long = {name: len(sql) for name, sql in STATEMENTS.items() if len(sql) > PSYCOPG_CACHED_LENGTH}
    assert too_long == {}


def test_compact_drops_comment_lines_and_indentation_only() -> None:
    sql = (
        "-- about it\nSELECT a,\n       b -- kept: after code\n  FROM t\n\n  --indented comment\n"
        "WHERE x = '--'\n"
    )
    assert compact(sql) == "SELECT a,\nb -- kept: after code\nFROM t\nWHERE x = '--'"
    assert parse_statements("-- name: one\n-- c\nSELECT 1\n-- name: two\nSELECT 2\n") == {
        "one": "SELECT 1",
        "two": "SELECT 2",
    }
