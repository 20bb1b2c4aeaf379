"""`fleetctl`, the operator's tool. Exit codes: 0 fine, 1 unhealthy or failed, 2 bad input."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import psycopg

from fleet.db import connect, resolve_url
from fleet.errors import ConfigError, DatabaseUnavailable, FleetError, ScheduleFileError
from fleet.migrate import current_version, latest_version, migrate
from fleet.ops.printable import printable
from fleet.schedfile import load

Command = Callable[[argparse.Namespace], int]


class UsageError(FleetError):
    """A command-line argument is invalid."""


def db(args: argparse.Namespace, role: str = "fleetctl") -> psycopg.Connection[Any]:
    url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or None
    return connect(resolve_url(url), role)


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


class _Parser(argparse.ArgumentParser):
    """Refuses a bad command line in one line naming the argument (exit 2), like every other bad
    input; `--help` has the usage. Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    p = _Parser(prog="fleetctl", description="Operate a fleet: schema, schedules, health, repair.")
    p.add_argument(
        "--database-url",
        help="libpq URI [env FLEET_DATABASE_URL]; unset: the embedded PostgreSQL in ./.fleet/pgdata",
    )
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


def main(argv: Sequence[str] | None = None) -> int:
    p, commands = parser()
    args = p.parse_args(argv)
    try:
        return commands[args.command](args)
    except ScheduleFileError as e:
        for line in e.problems:
            print(f"fleetctl {args.command}: {printable(line)}", file=sys.stderr)
        return 2
    except (UsageError, ConfigError) as e:
        print(f"fleetctl {args.command}: {printable(str(e))}", file=sys.stderr)
        return 2
    except DatabaseUnavailable as e:
        print(f"fleetctl {args.command}: {printable(str(e))}", file=sys.stderr)
        return 1
    except psycopg.errors.UndefinedTable:
        print(
            f"fleetctl {args.command}: the database has no fleet schema; run `fleetctl migrate`",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
