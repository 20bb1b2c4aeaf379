"""Versioned, forward-only schema migrations; safe to run twice or from two hosts at once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

_LOCK_KEY = 0x666C656574  # "fleet": serialises concurrent migrators


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """All migrations shipped with fleet, in order."""
    found = []
    for entry in resources.files("fleet").joinpath("migrations").iterdir():
        m = re.fullmatch(r"(\d{3})_([a-z0-9_]+)\.sql", entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    return found


def migrate(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply the missing migrations in one transaction (rows as dicts); returns the versions applied now."""
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fleet_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in conn.execute("SELECT version FROM fleet_migrations")}
        for mig in migrations():
            if mig.version in done:
                continue
            conn.execute(mig.sql.encode())
            conn.execute(
                "INSERT INTO fleet_migrations (version, name) VALUES (%s, %s)", (mig.version, mig.name)
            )
            applied_now.append(mig.version)
    return applied_now


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The newest applied migration, 0 for an empty database (rows as dicts)."""
    exists = conn.execute("SELECT to_regclass('fleet_migrations') IS NOT NULL AS e").fetchone()
    if not exists or not exists["e"]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) AS v FROM fleet_migrations").fetchone()
    return int(row["v"]) if row else 0
