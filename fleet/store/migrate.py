"""Versioned, forward-only schema migrations; safe to run twice or from two hosts at once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from fleet.errors import SchemaOutdated
from fleet.store.keys import MIGRATE_LOCK


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


ROLES = ("fleet_ticker", "fleet_worker", "fleet_operator", "fleet_reader", "fleet_alert")
# The roles every `migrate --roles` made: while they exist, each migrate grants the rights anew (and
# creates the roles a newer fleet added).
FIRST_ROLES = ROLES[:4]


def migrate(conn: psycopg.Connection[Any], roles: bool = False) -> list[int]:
    """Apply the missing migrations in one transaction (rows as dicts); returns the versions applied now.

    With `roles`, the NOLOGIN roles fleet_ticker, fleet_worker, fleet_operator, fleet_reader and
    fleet_alert are created if missing and granted what each needs (fleet/roles.sql). Everything is
    created in the schema `fleet`. A database migrated before the schema existed keeps its record
    of applied versions (moved from `public.fleet_migrations`), and migration 4 moves its tables,
    rows intact.
    """
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        conn.execute("CREATE SCHEMA IF NOT EXISTS fleet")
        if _exists(conn, "public.fleet_migrations") and not _exists(conn, "fleet.migrations"):
            conn.execute("ALTER TABLE public.fleet_migrations SET SCHEMA fleet")
            conn.execute("ALTER TABLE fleet.fleet_migrations RENAME TO migrations")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fleet.migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in conn.execute("SELECT version FROM fleet.migrations")}
        # Unqualified names in a migration land in `fleet` (pg_catalog is always searched first).
        conn.execute("SET LOCAL search_path = fleet")
        for mig in migrations():
            if mig.version in done:
                continue
            conn.execute(mig.sql.encode())
            conn.execute(
                "INSERT INTO fleet.migrations (version, name) VALUES (%s, %s)", (mig.version, mig.name)
            )
            applied_now.append(mig.version)
        # The roles' rights follow the schema: granted anew whenever the roles exist (or are asked for).
        if roles or roles_exist(conn):
            conn.execute(resources.files("fleet").joinpath("roles.sql").read_text(encoding="utf-8").encode())
    return applied_now


def roles_exist(conn: psycopg.Connection[Any]) -> bool:
    """True when the roles an earlier `fleetctl migrate --roles` made exist (rows as dicts)."""
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_roles WHERE rolname = ANY(%s)", (list(FIRST_ROLES),)
    ).fetchone()
    return bool(row and row["n"] == len(FIRST_ROLES))


def _exists(conn: psycopg.Connection[Any], relation: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (relation,)).fetchone()
    return bool(row and row["e"])


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The newest applied migration, 0 for an empty database (rows as dicts).

    A database migrated before the schema `fleet` existed answers its old version, so that the
    caller says to run `fleetctl migrate` rather than failing on a missing table.
    """
    for table in ("fleet.migrations", "public.fleet_migrations"):
        if _exists(conn, table):
            sql = f"SELECT coalesce(max(version), 0) AS v FROM {table}"  # one of two fixed names
            row = conn.execute(sql.encode()).fetchone()
            return int(row["v"]) if row else 0
    return 0


def latest_version() -> int:
    """The version the shipped migrations bring a database to."""
    return migrations()[-1].version


def check_schema(conn: psycopg.Connection[Any]) -> None:
    """Raise SchemaOutdated when the database's fleet schema is missing or older than this fleet's
    (rows as dicts). A newer one is fine: migrations only add, and hosts are upgraded one by one."""
    have, want = current_version(conn), latest_version()
    if have == 0:
        raise SchemaOutdated("the database has no fleet schema; run `fleetctl migrate`")
    if have < want:
        raise SchemaOutdated(
            f"the database's fleet schema is at version {have}, not {want}; run `fleetctl migrate`"
        )
