"""`fleetctl`, the operator's tool. Exit codes: 0 fine, 1 unhealthy or failed, 2 bad input."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from fleet.db import connect, resolve_url, url_params
from fleet.errors import ConfigError, FleetError, ScheduleFileError, SchemaOutdated
from fleet.migrate import check_schema, migrate
from fleet.schedfile import load

Command = Callable[[argparse.Namespace], int]


class UsageError(FleetError):
    """A command-line argument is invalid."""


def database_url(args: argparse.Namespace) -> str:
    """--database-url, else FLEET_DATABASE_URL, else the embedded server of the `fleetctl up` running
    in this directory; ConfigError naming the field when none is usable."""
    url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or None
    if url:
        url_params(url, "--database-url" if args.database_url else "FLEET_DATABASE_URL")
    return resolve_url(url)


def db(args: argparse.Namespace, role: str = "fleetctl") -> psycopg.Connection[Any]:
    return connect(database_url(args), role)


def require_schema(conn: psycopg.Connection[Any]) -> None:
    """Refuse (SchemaOutdated, exit 2) a database whose fleet schema is missing or older than this
    fleet's: only `fleetctl migrate` changes the schema, so the role that applies schedules needs no
    DDL rights."""
    check_schema(conn)


def cmd_migrate(args: argparse.Namespace) -> int:
    with db(args) as conn:
        applied = migrate(conn)
    print(f"migrated: applied {', '.join(map(str, applied))}" if applied else "migrated: schema up to date")
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
COMMAND_MODULES = ("fleet.ops.inspect", "fleet.ops.repair", "fleet.ops.metrics", "fleet.ops.supervise")


def parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    p = argparse.ArgumentParser(
        prog="fleetctl", description="Operate a fleet: schema, schedules, health, repair."
    )
    p.add_argument(
        "--database-url",
        help="libpq URI [env FLEET_DATABASE_URL]; unset: the embedded PostgreSQL of the `fleetctl up` "
        "running in this directory",
    )
    p.add_argument("--debug", action="store_true", help="show the traceback behind an error")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("migrate", help="create or upgrade the schema")
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


BAD_INPUT = (UsageError, ConfigError, SchemaOutdated)
# Commands whose changes are one transaction: interrupted, they leave nothing behind.
ALL_OR_NOTHING = ("migrate", "apply")


def main(argv: Sequence[str] | None = None) -> int:
    command = "fleetctl"
    try:
        p, commands = parser()
        args = p.parse_args(argv)
        command = f"fleetctl {args.command}"
        return run(commands[args.command], args)
    except KeyboardInterrupt:
        # Ctrl-C: a statement in flight is cancelled and its transaction rolled back (psycopg).
        done = "; nothing was changed" if command.split()[-1] in ALL_OR_NOTHING else ""
        print(f"{command}: interrupted{done}", file=sys.stderr)
        return 130


def run(handler: Command, args: argparse.Namespace) -> int:
    """Run one command; a FleetError is a line on stderr (with its cause's traceback under --debug)."""
    name = f"fleetctl {args.command}"
    try:
        return handler(args)
    except FleetError as e:
        if getattr(args, "debug", False) and e.__cause__ is not None:
            traceback.print_exception(e.__cause__)
        if isinstance(e, ScheduleFileError):
            for line in e.problems:
                print(f"{name}: {line}", file=sys.stderr)
            return 2
        print(f"{name}: {e}", file=sys.stderr)
        return 2 if isinstance(e, BAD_INPUT) else 1  # 1: the database or supervisord out of reach
    except psycopg.errors.UndefinedTable:
        print(f"{name}: the database has no fleet schema; run `fleetctl migrate`", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
