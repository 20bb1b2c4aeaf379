"""`fleetctl`, the operator's tool. Exit codes: 0 fine, 1 unhealthy or failed, 2 bad input."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from fleet.client import Client
from fleet.db import connect, permission_denied, resolve_url
from fleet.errors import (
    ConfigError,
    DatabaseError,
    DatabaseUnavailable,
    FleetError,
    PermissionDenied,
    RequestError,
    ScheduleFileError,
    SchemaMissing,
)
from fleet.migrate import ROLES, current_version, latest_version, migrate
from fleet.schedfile import load

Command = Callable[[argparse.Namespace], int]


class UsageError(FleetError):
    """A command-line argument is invalid."""


def db(args: argparse.Namespace, role: str = "fleetctl") -> psycopg.Connection[Any]:
    url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or None
    return connect(resolve_url(url), role)


def client(args: argparse.Namespace) -> Client:
    """The fleet.Client of the database the command names: the commands that an application can
    also run through a Client get their data through it, so both take one code path."""
    url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or None
    return Client(resolve_url(url), application_name="fleetctl")


def require_schema(conn: psycopg.Connection[Any]) -> None:
    """Refuse (UsageError) a database whose fleet schema is missing or older than this fleet's: only
    `fleetctl migrate` changes the schema, so the role that applies schedules needs no DDL rights."""
    have, want = current_version(conn), latest_version()
    if have == 0:
        raise UsageError("the database has no fleet schema; run `fleetctl migrate`")
    if have < want:
        raise UsageError(
            f"the database's fleet schema is at version {have}, not {want}; run `fleetctl migrate`"
        )


def cmd_migrate(args: argparse.Namespace) -> int:
    with db(args) as conn:
        applied = migrate(conn, roles=args.roles)
    print(f"migrated: applied {', '.join(map(str, applied))}" if applied else "migrated: schema up to date")
    if args.roles:
        print(f"roles: {', '.join(ROLES)} granted their rights; grant one to each login role")
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from fleet.apply import apply_specs

    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScheduleFileError([f"file: cannot read {path}: {e.strerror}"]) from None
    specs = load(text)
    with db(args) as conn:
        require_schema(conn)
        r = apply_specs(conn, specs, prune=args.prune)
    for label, names in (
        ("created", r.created),
        ("updated", r.updated),
        ("replanned", r.replanned),
        ("disabled", r.disabled),
        ("unchanged", r.unchanged),
    ):
        if names:
            print(f"{label}: {', '.join(names)}")
    print(f"applied {len(specs)} schedule(s) from {path}")
    return 0


# Each of these modules adds its subcommands: `add_commands(subparsers) -> dict[name, handler]`.
COMMAND_MODULES = (
    "fleet.ops.inspect",
    "fleet.ops.repair",
    "fleet.ops.metrics",
    "fleet.ops.supervise",
    "fleet.ops.dashboard.command",
)


def version() -> str:
    """The installed distribution's version, from its package metadata."""
    try:
        return importlib.metadata.version("fleet")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    p = argparse.ArgumentParser(
        prog="fleetctl", description="Operate a fleet: schema, schedules, health, repair."
    )
    p.add_argument("--version", action="version", version=f"fleetctl {version()}")
    p.add_argument(
        "--database-url",
        help="libpq URI [env FLEET_DATABASE_URL]; unset: the embedded PostgreSQL in ./.fleet/pgdata",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    mp = sub.add_parser("migrate", help="create or upgrade the schema (as the schema's owner)")
    mp.add_argument(
        "--roles",
        action="store_true",
        help="also create the NOLOGIN roles fleet_ticker, fleet_worker, fleet_operator and fleet_reader "
        "and grant each the least it needs (safe to repeat)",
    )
    ap = sub.add_parser("apply", help="make the database's schedules match a TOML file (all or nothing)")
    ap.add_argument("file", help="the schedules file")
    ap.add_argument("--prune", action="store_true", help="disable schedules that are not in the file")
    commands: dict[str, Command] = {"migrate": cmd_migrate, "apply": cmd_apply}
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        commands.update(module.add_commands(sub))
    return p, commands


# The fleet role a command's login role needs (`fleetctl migrate --roles`); others need fleet_operator.
NEEDS = {
    "migrate": "ownership of the schema (run migrate as its owner)",
    **{
        c: "fleet_reader"
        for c in ("status", "runs", "show", "dead", "trace", "workers", "metrics", "dashboard")
    },
}


def main(argv: Sequence[str] | None = None) -> int:
    p, commands = parser()
    args = p.parse_args(argv)
    try:
        return commands[args.command](args)
    except ScheduleFileError as e:
        for line in e.problems:
            print(f"fleetctl {args.command}: {line}", file=sys.stderr)
        return 2
    except (UsageError, ConfigError, RequestError, SchemaMissing, PermissionDenied) as e:
        print(f"fleetctl {args.command}: {e}", file=sys.stderr)
        return 2
    except (DatabaseUnavailable, DatabaseError) as e:
        print(f"fleetctl {args.command}: {e}", file=sys.stderr)
        return 1
    except psycopg.errors.InsufficientPrivilege as e:
        url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or ""
        needs = NEEDS.get(args.command, "fleet_operator")
        print(f"fleetctl {args.command}: {permission_denied(e, url, needs)}", file=sys.stderr)
        return 2
    except psycopg.errors.UndefinedTable:
        print(
            f"fleetctl {args.command}: the database has no fleet schema; run `fleetctl migrate`",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
