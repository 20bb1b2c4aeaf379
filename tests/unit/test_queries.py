"""The named statements as they are sent."""

from __future__ import annotations

from fleet.store.queries import STATEMENTS, compact, parse_statements

# psycopg keeps its conversion of a statement's placeholders only for texts up to this length
# (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH); a longer hot statement is parsed at every execution.
PSYCOPG_CACHED_LENGTH = 4096


def test_every_statement_is_short_enough_for_psycopg_to_cache() -> None:
    too_long = {name: len(sql) for name, sql in STATEMENTS.items() if len(sql) > PSYCOPG_CACHED_LENGTH}
    assert too_long == {}


def test_compact_drops_comment_lines_indentation_and_spaces_that_do_not_matter() -> None:
    sql = (
        "-- about it\nSELECT a,\n       b -- kept: after code\n  FROM t\n\n  --indented comment\n"
        "WHERE x = '--' AND f(y, z) >= 1 AND w = 'a, b = c' AND v = 'it''s, = so' AND n + 1 <> m <= -2\n"
    )
    assert compact(sql) == (
        "SELECT a,\nb -- kept: after code\nFROM t\nWHERE x='--' AND f(y,z)>=1 AND w='a, b = c' AND v='it''s, = so'"
        " AND n+1<>m <= -2"
    )
    assert parse_statements("-- name: one\n-- c\nSELECT 1\n-- name: two\nSELECT 2\n") == {
        "one": "SELECT 1",
        "two": "SELECT 2",
    }


def test_statements_notify_only_the_channels_defined_in_keys_and_take_lock_keys_as_parameters() -> None:
    import re

    from fleet.store import keys

    channels = {keys.RUNS_CHANNEL, keys.SCHEDULES_CHANNEL}
    for name, sql in STATEMENTS.items():
        for channel in re.findall(r"pg_notify\('([^']*)'", sql):
            assert channel in channels, (name, channel)
        for key in re.findall(r"pg_(?:try_)?advisory_(?:xact_)?lock\(([^)]*)\)", sql):
            assert key.startswith("%("), (name, key)  # a constant of fleet.store.keys, passed in


def test_statement_names_are_noun_verb() -> None:
    import re

    bad = [name for name in STATEMENTS if not re.fullmatch(r"[a-z]+_[a-z]+(_[a-z]+)*", name)]
    assert not bad
