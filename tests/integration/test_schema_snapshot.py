"""Migrating an empty database (and granting the roles) yields exactly the committed schema snapshot
(`schema.sql`); a change
to the migrations changes the snapshot in the same commit (`python -m tests.schema_snapshot`)."""

from __future__ import annotations

from typing import Any

import psycopg

from fleet.store.migrate import migrate
from tests.schema_snapshot import snapshot
from tests.support import ROOT


def test_migrations_yield_the_committed_schema(conn: psycopg.Connection[Any]) -> None:
    expected = (ROOT / "schema.sql").read_text(encoding="utf-8")
    migrate(conn, roles=True)  # a copy of the template migrated from empty, with the roles' grants and rules
    got = snapshot(conn)
    assert got == expected, "schema.sql is out of date: python -m tests.schema_snapshot > schema.sql"
