"""The fleet schema as canonical text, read from the catalog of a migrated database.

`python -m tests.schema_snapshot > schema.sql` writes it anew (against FLEET_DATABASE_URL, in a
scratch database it makes and drops); tests/integration/test_schema_snapshot.py checks that migrating
an empty database yields exactly the committed file. The text is built from the catalog, not from
pg_dump, so that it reads the same on every supported PostgreSQL version.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from fleet.store.db import connect
from fleet.store.migrate import migrate

HEADER = (
    "-- The schema `fleet` as migrations build it, in canonical form (generated: python -m\n"
    "-- tests.schema_snapshot > schema.sql). A test checks that migrating an empty database yields it.\n"
)


def snapshot(conn: psycopg.Connection[Any]) -> str:
    """The schema `fleet` of the database of `conn` (rows as dicts), as canonical text."""
    out = [HEADER]
    for r in conn.execute(
        "SELECT t.typname, string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) AS labels "
        "FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid "
        "WHERE t.typnamespace = 'fleet'::regnamespace GROUP BY t.typname ORDER BY t.typname"
    ):
        out.append(f"CREATE TYPE fleet.{r['typname']} AS ENUM ({r['labels']});\n")
    tables = [
        r["relname"]
        for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'fleet'::regnamespace AND relkind IN ('r', 'p') "
            "ORDER BY relname"
        )
    ]
    for table in tables:
        oid = f"fleet.{table}"
        cols = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS notnull, "
            "pg_get_expr(d.adbin, d.adrelid) AS dflt "
            "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (oid,),
        ).fetchall()
        lines = []
        for c in cols:
            line = f"    {c['attname']} {c['type']}"
            if c["notnull"]:
                line += " NOT NULL"
            if c["dflt"] is not None:
                line += f" DEFAULT {c['dflt']}"
            lines.append(line)
        for k in conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint "
            "WHERE conrelid = %s::regclass ORDER BY contype, conname",
            (oid,),
        ):
            lines.append(f"    CONSTRAINT {k['conname']} {k['def']}")
        out.append(f"\nCREATE TABLE fleet.{table} (\n" + ",\n".join(lines) + "\n);\n")
        options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (oid,)).fetchone()
        if options and options["reloptions"]:
            out.append(f"ALTER TABLE fleet.{table} SET ({', '.join(sorted(options['reloptions']))});\n")
        for i in conn.execute(
            "SELECT pg_get_indexdef(i.indexrelid) AS def FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid) ORDER BY c.relname",
            (oid,),
        ):
            out.append(f"{i['def']};\n")
        for g in conn.execute(
            "SELECT pg_get_triggerdef(oid) AS def FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal "
            "ORDER BY tgname",
            (oid,),
        ):
            out.append(f"{g['def']};\n")
        out.extend(_row_security(conn, oid))
        out.extend(_grants(conn, table))
    for f in conn.execute(
        "SELECT pg_get_functiondef(p.oid) AS def FROM pg_proc p "
        "WHERE p.pronamespace = 'fleet'::regnamespace ORDER BY p.proname"
    ):
        out.append("\n" + f["def"].strip() + ";\n")
    return "".join(out)


def _row_security(conn: psycopg.Connection[Any], oid: str) -> list[str]:
    """The table's row-level security and its policies (the roles' rules, fleet/roles.sql)."""
    out = []
    row = conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = %s::regclass", (oid,)).fetchone()
    if row and row["relrowsecurity"]:
        out.append(f"ALTER TABLE {oid} ENABLE ROW LEVEL SECURITY;\n")
    for p in conn.execute(
        "SELECT policyname, permissive, roles::text[] AS roles, cmd, qual, with_check FROM pg_policies "
        "WHERE schemaname || '.' || tablename = %s ORDER BY policyname",
        (oid,),
    ):
        text = f"CREATE POLICY {p['policyname']} ON {oid}"
        if p["permissive"] != "PERMISSIVE":
            text += f" AS {p['permissive']}"
        text += f" FOR {p['cmd']} TO {', '.join(sorted(p['roles']))}"
        if p["qual"] is not None:
            text += f" USING ({p['qual']})"
        if p["with_check"] is not None:
            text += f" WITH CHECK ({p['with_check']})"
        out.append(text + ";\n")
    return out


def _grants(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """What the fleet roles are granted on the table, whole or by column."""
    out = [
        f"GRANT {g['privileges']} ON fleet.{table} TO {g['grantee']};\n"
        for g in conn.execute(
            "SELECT grantee, string_agg(privilege_type, ', ' ORDER BY privilege_type) AS privileges "
            "FROM information_schema.role_table_grants WHERE table_schema = 'fleet' AND table_name = %s "
            "AND grantee LIKE 'fleet\\_%%' GROUP BY grantee ORDER BY grantee",
            (table,),
        )
    ]
    out += [
        f"GRANT {g['privilege_type']} ({g['columns']}) ON fleet.{table} TO {g['grantee']};\n"
        for g in conn.execute(
            "SELECT c.grantee, c.privilege_type, string_agg(c.column_name, ', ' ORDER BY c.column_name) AS columns "
            "FROM information_schema.role_column_grants c WHERE c.table_schema = 'fleet' AND c.table_name = %s "
            "AND c.grantee LIKE 'fleet\\_%%' AND NOT EXISTS (SELECT 1 FROM information_schema.role_table_grants t "
            "WHERE t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.grantee = c.grantee "
            "AND t.privilege_type = c.privilege_type) "
            "GROUP BY c.grantee, c.privilege_type ORDER BY c.grantee, c.privilege_type",
            (table,),
        )
    ]
    return out


def main() -> int:
    server = os.environ.get("FLEET_DATABASE_URL")
    if not server:
        print("set FLEET_DATABASE_URL to a server where a scratch database may be made", file=sys.stderr)
        return 2
    name = f"fleet_snapshot_{os.getpid()}"
    with connect(server, "fleet schema snapshot") as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with connect(make_conninfo(server, dbname=name), "fleet schema snapshot") as conn:
            migrate(conn, roles=True)  # the roles' grants and rules are part of the schema
            sys.stdout.write(snapshot(conn))
    finally:
        with connect(server, "fleet schema snapshot") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
