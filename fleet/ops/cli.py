"""`fleetctl`, the operator's tool. Exit codes: 0 fine, 1 unhealthy or failed, 2 bad input."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import psycopg

from fleet.errors import (
    ConfigError,
    FleetError,
    PermissionDenied,
    RequestError,
    ScheduleFileError,
    SchemaMissing,
    SchemaOutdated,
    UsageError,
)
from fleet.observe.printable import printable
from fleet.ops.connection import db, require_schema
from fleet.process.signals import interrupts_deferred
from fleet.process.usage import Parser
from fleet.store.db import describe, permission_denied

Command = Callable[[argparse.Namespace], int]
MAX_ARGS_LIMIT = 16 * 1024 * 1024  # what --max-args-bytes may raise the bound to


def cmd_migrate(args: argparse.Namespace) -> int:
    from fleet.store.migrate import ROLES, migrate

    with db(args) as conn:
        applied = migrate(conn, roles=args.roles)
    print(f"migrated: applied {', '.join(map(str, applied))}" if applied else "migrated: schema up to date")
    if args.roles:
        print(f"roles: {', '.join(ROLES)} granted their rights; grant one to each login role")
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from fleet.admin.alert_routes import apply_routes, gather_all
    from fleet.admin.apply import apply_specs
    from fleet.admin.audit import check_by, check_note
    from fleet.declare import declared
    from fleet.ops.apply_report import (
        print_plan,
        print_result,
        print_routes,
        warn_catchup_overlap,
        warn_unserved,
    )

    if not args.files and not args.app:
        raise UsageError("give a schedules FILE or --app MODULE (or both)")
    import_apps(args.app or [])
    in_code = declared() if args.app else []
    if args.app and not in_code:
        # Most likely a module that declares them was not imported; with --prune, applying nothing
        # from code would disable them all.
        raise UsageError(
            f"--app {', '.join(args.app)}: declared no schedule "
            "(fleet.Schedule, fleet.Cron, fleet.Every or @fleet.job(..., schedule=...))"
        )
    files = [Path(f) for f in args.files]
    if not 1 <= args.max_args_bytes <= MAX_ARGS_LIMIT:
        raise UsageError(f"--max-args-bytes: between 1 and {MAX_ARGS_LIMIT:,}")
    # The alert routes come from the files (none from code); with no file, those stored stay.
    specs, routes = gather_all(files, in_code, args.max_args_bytes)
    by, note = check_by(args.by, "--by"), check_note(args.note, "--note")
    with db(args) as conn:
        require_schema(conn)
        with conn.transaction():  # schedules and routes: all or nothing
            r = apply_specs(conn, specs, prune=args.prune, plan=args.plan, by=by, note=note)
            routed = (
                apply_routes(conn, routes, prune=args.prune, plan=args.plan) if routes is not None else None
            )
        sources = [str(f) for f in files] + [f"--app {m}" for m in args.app or []]
        (print_plan if args.plan else print_result)(r, len(specs), " and ".join(sources))
        if routed is not None and (routes or routed.removed):
            print_routes(routed, args.plan)
        warn_catchup_overlap(r, specs)
        warn_unserved(conn, specs)
    return 0


def import_apps(modules: Sequence[str]) -> None:
    """Import the app modules (from the current directory too, as a worker does); UsageError in one
    line for one that fails."""
    here = os.getcwd()
    sys.path.insert(0, here)
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception as e:  # noqa: BLE001 - an application's module can raise anything at import
                raise UsageError(f"--app: cannot import {module!r}: {_one_line(e)}") from None
    finally:
        sys.path.remove(here)


def _one_line(e: BaseException) -> str:
    """An exception raised by importing a module, in one line, with where it was raised."""
    text = (str(e).strip().splitlines() or [""])[0]
    if isinstance(e, ImportError | SyntaxError):  # their text says which module or line
        return text if isinstance(e, ImportError) else f"{type(e).__name__}: {text}"
    where = ""
    fleet_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tb = e.__traceback__
    while tb is not None:  # the innermost frame of the app's code, not of the import machinery or fleet
        path = tb.tb_frame.f_code.co_filename
        if not path.startswith("<") and not os.path.abspath(path).startswith(fleet_dir + os.sep):
            where = f" ({os.path.relpath(path)}:{tb.tb_lineno})"
        tb = tb.tb_next
    return f"{type(e).__name__}: {text}{where}" if text else f"{type(e).__name__}{where}"


# Each of these modules adds its subcommands: `add_commands(subparsers) -> dict[name, handler]`.
COMMAND_MODULES = (
    "fleet.ops.status",
    "fleet.ops.repair_commands",
    "fleet.ops.verify_report",
    "fleet.ops.audit_report",
    "fleet.ops.metrics",
    "fleet.ops.supervise",
    "fleet.ops.dashboard.command",
    "fleet.alert.command",
)
# The module of each of their commands: a command line that names one imports that module alone
# (`fleetctl status` starts without the metrics' or the dashboard's), --help and the rest all of them.
COMMAND_MODULE = {
    **dict.fromkeys(("status", "runs", "show", "dead", "trace", "workers"), "fleet.ops.status"),
    **dict.fromkeys(
        ("trigger", "backfill", "pause", "resume", "retry", "discard", "prune"), "fleet.ops.repair_commands"
    ),
    "verify": "fleet.ops.verify_report",
    "audit": "fleet.ops.audit_report",
    "metrics": "fleet.ops.metrics",
    **dict.fromkeys(("up", "down", "scale", "supervisor-config", "exec-env"), "fleet.ops.supervise"),
    "dashboard": "fleet.ops.dashboard.command",
    "alert": "fleet.alert.command",
}


def command_named(argv: Sequence[str]) -> str | None:
    """The command an argument list names (its first word that is no option nor an option's value)."""
    words = iter(argv)
    for word in words:
        if word == "--database-url":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def version() -> str:
    """The installed distribution's version, from its package metadata."""
    from importlib import metadata

    try:
        return metadata.version("fleet")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Version(argparse.Action):
    """--version, reading the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(f"fleetctl {version()}")
        parser.exit()


def parser(command: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    """fleetctl's parser and handlers; with `command`, only `migrate` and the commands of its module
    are added (`apply` is one of fleetctl's own, as is `migrate`)."""
    p = Parser(prog="fleetctl", description="Operate a fleet: schema, schedules, health, repair.")
    p.add_argument("--version", action=_Version)
    p.add_argument(
        "--database-url",
        help="libpq URI [env FLEET_DATABASE_URL]; unset: the embedded PostgreSQL of the `fleetctl up` "
        "running in this directory",
    )
    p.add_argument("--debug", action="store_true", help="show the traceback behind an error")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    mp = sub.add_parser("migrate", help="create or upgrade the schema (as the schema's owner)")
    mp.add_argument(
        "--roles",
        action="store_true",
        help="also create the NOLOGIN roles fleet_ticker, fleet_worker, fleet_operator, fleet_reader and "
        "fleet_alert "
        "and grant each the least it needs (safe to repeat)",
    )
    commands: dict[str, Command] = {"migrate": cmd_migrate}
    own = COMMAND_MODULE.get(command or "")
    if not own:
        commands["apply"] = add_apply(sub)
    for name in (own,) if own else () if command in commands else COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        commands.update(module.add_commands(sub))
    return p, commands


def add_apply(sub: Any) -> Command:
    """Add the `apply` command. Its limit comes from the schedules file's reader, imported here: a
    command line naming a command of the other modules starts without it."""
    from fleet.timing.schedfile import MAX_ARGS_BYTES

    ap = sub.add_parser(
        "apply",
        help="make the database's schedules match those declared in code and files (all or nothing)",
        description="Make the database's schedules match the schedules declared by the --app modules "
        "and the files, all or nothing; only schedules whose definition changed are written.",
    )
    ap.add_argument("files", nargs="*", metavar="FILE", help="a schedules file (TOML)")
    ap.add_argument(
        "--app",
        action="append",
        metavar="MODULE",
        help="import MODULE and apply the schedules it declares (fleet.Schedule, @fleet.job(schedule=...)); "
        "repeatable",
    )
    ap.add_argument("--prune", action="store_true", help="disable schedules declared nowhere given")
    ap.add_argument(
        "--max-args-bytes",
        type=int,
        default=MAX_ARGS_BYTES,
        metavar="N",
        help=f"the most JSON a schedule's args may hold ({MAX_ARGS_BYTES:,}): they are copied into every run",
    )
    ap.add_argument(
        "--plan", action="store_true", help="print what would change, field by field; write nothing"
    )
    ap.add_argument(
        "--by",
        metavar="NAME",
        help="who applies, recorded with the database role in an audit row per schedule changed "
        "(`fleetctl audit`; at most 100 characters)",
    )
    ap.add_argument("--note", metavar="TEXT", help="why, recorded in the audit rows (at most 500 characters)")
    return cmd_apply


# The fleet role a command's login role needs (`fleetctl migrate --roles`); others need fleet_operator.
NEEDS = {
    "migrate": "ownership of the schema (run migrate as its owner)",
    **{
        c: "fleet_reader"
        for c in (
            "status",
            "runs",
            "show",
            "dead",
            "trace",
            "workers",
            "verify",
            "audit",
            "metrics",
            "dashboard",
        )
    },
    "alert": "fleet_alert",
}
BAD_INPUT = (UsageError, ConfigError, SchemaOutdated, SchemaMissing, RequestError, PermissionDenied)
# Commands whose changes are one transaction: interrupted, they leave nothing behind.
ALL_OR_NOTHING = ("migrate", "apply")


# psycopg's own warnings (one when a statement cancelled on Ctrl-C ends a pipeline, say) are not
# for the terminal: what fleetctl has to say it says in its one line.
_QUIET = logging.NullHandler()


def main(argv: Sequence[str] | None = None) -> int:
    command = "fleetctl"
    if _QUIET not in logging.getLogger("psycopg").handlers:
        logging.getLogger("psycopg").addHandler(_QUIET)
    try:
        with interrupts_deferred():  # the command's modules load
            p, commands = parser(command_named(sys.argv[1:] if argv is None else argv))
        args = p.parse_args(argv)
        command = f"fleetctl {args.command}"
        return run(commands[args.command], args)
    except KeyboardInterrupt:
        # Ctrl-C: a statement in flight is cancelled and its transaction rolled back (psycopg).
        done = "; nothing was changed" if command.split()[-1] in ALL_OR_NOTHING else ""
        print(f"{command}: interrupted{done}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The output's reader went away (`fleetctl status --json | head -1`): stop as a program
        # that SIGPIPE ended, with no traceback, nor another error when the rest is flushed at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


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
                print(f"{name}: {printable(line)}", file=sys.stderr)
            return 2
        print(f"{name}: {printable(str(e))}", file=sys.stderr)
        return 2 if isinstance(e, BAD_INPUT) else 1  # 1: the database or supervisord out of reach
    except psycopg.errors.InsufficientPrivilege as e:
        url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or ""
        needs = NEEDS.get(args.command, "fleet_operator")
        print(f"{name}: {printable(str(permission_denied(e, url, needs)))}", file=sys.stderr)
        return 2
    except psycopg.errors.UndefinedTable:
        print(f"{name}: the database has no fleet schema; run `fleetctl migrate`", file=sys.stderr)
        return 2
    except psycopg.DataError as e:
        # A value the database cannot hold (a NUL character, a number out of range): bad input.
        print(f"{name}: invalid value: {printable(describe(e))}", file=sys.stderr)
        return 2
    except psycopg.Error as e:
        print(f"{name}: {printable(describe(e))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
