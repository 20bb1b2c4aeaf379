"""fleetctl commands that run fleet under supervisord: supervisor-config, up, scale and exec-env."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet.errors import ConfigError, UsageError
from fleet.ops.control import Supervisor, SupervisorUnavailable, scale_workers, serverurl_from_config
from fleet.ops.host import default_bin_dir, default_grace
from fleet.process.envfile import read_env_file
from fleet.process.supervisor import DEFAULT_MAX_WORKERS, SupervisorOptions, render

Command = Callable[[argparse.Namespace], int]
UP_CONFIG = Path(".fleet") / "supervisord.conf"
SCALE_TIMEOUT_S = 600.0
GRACE_HELP = "seconds a stopping worker lets its jobs finish [env FLEET_GRACE] (30)"


def add_commands(sub: Any) -> dict[str, Command]:
    p = sub.add_parser(
        "supervisor-config",
        help="print a supervisord configuration for this host (tickers, workers and alert processes)",
        description="Print a supervisord configuration running fleet on this host. Processes read "
        "FLEET_DATABASE_URL and other FLEET_* settings from an environment file at each start "
        "(through `fleetctl exec-env`), so no secret is written into the configuration.",
    )
    p.add_argument("--workers", metavar="N", type=int, default=2, help="workers started with supervisord (2)")
    p.add_argument(
        "--max-workers",
        metavar="N",
        type=int,
        help=f"worker slots, the most `fleetctl scale` can start (max(N, {DEFAULT_MAX_WORKERS}))",
    )
    p.add_argument(
        "--tickers", metavar="M", type=int, default=1, help="tickers (1; more are safe and take over)"
    )
    p.add_argument(
        "--alerts",
        metavar="K",
        type=int,
        default=1,
        help="alert processes, `fleetctl alert` (1; more are safe: each notice is sent by one)",
    )
    p.add_argument(
        "--app", metavar="MODULE", action="append", default=[], help="module that registers jobs (repeatable)"
    )
    p.add_argument("--jobs", metavar="FILE", help="TOML file declaring command jobs")
    p.add_argument(
        "--logs",
        metavar="DIR",
        help="write rotated log files in this directory (default: supervisord's stdout)",
    )
    p.add_argument(
        "--syslog",
        action="store_true",
        help="log to syslog instead of stdout (journald, when systemd runs supervisord)",
    )
    p.add_argument(
        "--env-file",
        metavar="FILE",
        default="/etc/fleet/fleet.env",
        help="environment file read at each process start (/etc/fleet/fleet.env); '' for none",
    )
    p.add_argument(
        "--env-allow",
        metavar="PATTERN",
        action="append",
        default=[],
        help="variables beyond FLEET_*, OTEL_*, PG* the environment file may set, and FLEET_APP or "
        "FLEET_JOBS_FILE, which choose the code a worker runs (repeatable)",
    )
    p.add_argument(
        "--run-dir", metavar="DIR", default="/run/fleet", help="directory of the control socket and pid file"
    )
    p.add_argument("--user", metavar="NAME", help="user the processes run as (when supervisord runs as root)")
    p.add_argument("--directory", metavar="DIR", help="working directory of the processes (the current one)")
    p.add_argument(
        "--bin-dir", metavar="DIR", help="directory of fleetctl, fleet-ticker, fleet-worker (this install's)"
    )
    p.add_argument("--grace", metavar="S", type=float, help=GRACE_HELP)
    p.add_argument(
        "--programs-only",
        action="store_true",
        help="print only the program sections, to include into an existing supervisord",
    )

    u = sub.add_parser(
        "up",
        help="run a fleet here: database, schema, schedules, a ticker and workers, and a live view",
        description="Run a whole fleet in this directory until Ctrl-C (or `fleetctl down`): the database "
        "(FLEET_DATABASE_URL, or the embedded PostgreSQL in .fleet/pgdata, which the other fleet commands "
        "started here use while `up` runs), the schema, the schedules (those the --app modules declare "
        "and --schedules FILE; the examples when there are none and the database has none), "
        "supervisord with a ticker and N workers, a live view and the web dashboard (`fleetctl dashboard`).",
    )
    u.add_argument("--workers", metavar="N", type=int, default=2, help="workers to start (2)")
    u.add_argument(
        "--max-workers",
        metavar="N",
        type=int,
        help=f"worker slots for `fleetctl scale` (max(N, {DEFAULT_MAX_WORKERS}))",
    )
    u.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=[],
        help="module that registers jobs (repeatable; default: fleet.examples.demo_jobs)",
    )
    u.add_argument("--jobs", metavar="FILE", help="TOML file declaring command jobs")
    u.add_argument(
        "--schedules",
        metavar="FILE",
        help="schedules file to apply, beside the schedules the --app modules declare "
        "(default: the examples, if there are none and the database has none)",
    )
    u.add_argument("--grace", metavar="S", type=float, help=GRACE_HELP)
    u.add_argument(
        "--dashboard",
        metavar="HOST:PORT",
        default="127.0.0.1:8787",
        help="where the web dashboard listens (127.0.0.1:8787)",
    )
    u.add_argument("--no-dashboard", action="store_true", help="start no web dashboard")
    u.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an --app module that fails to import",
    )

    sub.add_parser(
        "down",
        help="stop what `fleetctl up` runs or left running here: supervisord, the embedded PostgreSQL",
        description="Stop the fleet of this directory: a running `fleetctl up` (as Ctrl-C would), a "
        "supervisord an `up` that crashed left behind, and the embedded PostgreSQL in .fleet/pgdata. "
        "Says what it stopped; exit 0 also when nothing was running.",
    )

    s = sub.add_parser(
        "scale",
        help="change how many workers run, without restarting the others",
        description="Start or stop worker slots of a running supervisord so that N workers run. Stopped "
        "workers finish or hand back their runs first.",
    )
    s.add_argument("n", type=int, metavar="N", help="number of workers that should run")
    s.add_argument(
        "--config",
        metavar="FILE",
        type=Path,
        default=UP_CONFIG,
        help=f"the supervisord configuration ({UP_CONFIG}, the fleet `fleetctl up` runs here)",
    )

    e = sub.add_parser(
        "exec-env",
        help="run a command with the variables of an environment file added",
        description="Read FILE (NAME=value lines, as systemd's EnvironmentFile= reads them), add its "
        "variables to the environment (the file wins) and replace this process with COMMAND.",
    )
    e.add_argument(
        "file",
        help="the environment file (refused when another user owns it or its directory, or others may "
        "write either)",
    )
    e.add_argument(
        "--allow",
        metavar="PATTERN",
        action="append",
        default=[],
        help="also allow variables matching PATTERN (e.g. APP_*; repeatable); "
        "FLEET_*, OTEL_* and PG* are always allowed, but FLEET_APP and FLEET_JOBS_FILE only when named",
    )
    e.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG ...]")

    def cmd_up(args: argparse.Namespace) -> int:
        from fleet.ops.up import cmd_up

        return cmd_up(args)

    def cmd_down(args: argparse.Namespace) -> int:
        from fleet.ops.down import cmd_down

        return cmd_down(args)

    return {
        "supervisor-config": cmd_supervisor_config,
        "up": cmd_up,
        "down": cmd_down,
        "scale": cmd_scale,
        "exec-env": cmd_exec_env,
    }


def cmd_supervisor_config(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).absolute()
    opts = SupervisorOptions(
        bin_dir=str(Path(args.bin_dir).absolute() if args.bin_dir else default_bin_dir()),
        directory=str(Path(args.directory or os.getcwd()).absolute()),
        workers=args.workers,
        max_workers=args.max_workers,
        tickers=args.tickers,
        alerts=args.alerts,
        apps=tuple(args.app),
        jobs_file=str(Path(args.jobs).absolute()) if args.jobs else None,
        env_file=str(Path(args.env_file).absolute()) if args.env_file else None,
        env_allow=tuple(args.env_allow),
        logs_dir=str(Path(args.logs).absolute()) if args.logs else None,
        syslog=args.syslog,
        socket=str(run_dir / "supervisor.sock"),
        pidfile=str(run_dir / "supervisord.pid"),
        user=args.user,
        grace_s=args.grace if args.grace is not None else default_grace(),
        programs_only=args.programs_only,
    )
    try:
        text = render(opts)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    sys.stdout.write(text)
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    if args.n < 0:
        raise UsageError("N: must not be negative")
    if not args.config.exists():
        here = args.config == UP_CONFIG
        where = "in this directory (start one with `fleetctl up`)" if here else str(args.config)
        print(f"fleetctl scale: no fleet runs {where}", file=sys.stderr)
        return 1
    try:
        sv = Supervisor(serverurl_from_config(args.config))
        slots = len(sv.workers())
        if args.n > slots:
            how = (
                "restart `fleetctl up` with a larger --max-workers"
                if args.config == UP_CONFIG
                else "write its configuration again with `fleetctl supervisor-config --max-workers` larger"
            )
            raise UsageError(f"N: this fleet has {slots} worker slots; {how}")
        print(
            f"scaling to {args.n} worker{'' if args.n == 1 else 's'} (stopping workers finish or hand back "
            "their runs first)",
            flush=True,
        )
        r = scale_workers(sv, args.n, SCALE_TIMEOUT_S)
    except SupervisorUnavailable as e:
        here = args.config == UP_CONFIG
        print(f"fleetctl scale: {'no fleet is up in this directory: ' if here else ''}{e}", file=sys.stderr)
        return 1
    for label, names in (("started", r.started), ("stopped", r.stopped)):
        if names:
            print(f"{label}: {', '.join(names)}")
    print(f"{r.running} of {r.slots} worker slots running")
    if r.failed:
        print(
            f"fleetctl scale: did not reach the wanted state: {', '.join(r.failed)} (see their logs)",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_exec_env(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("give the command to run after --")
    try:
        env, warnings = read_env_file(Path(args.file), args.allow)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    for warning in warnings:
        print(f"fleetctl exec-env: warning: {warning}", file=sys.stderr)
    try:
        os.execvpe(argv[0], argv, {**os.environ, **env})
    except OSError as e:
        print(f"fleetctl exec-env: cannot run {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached: execvpe replaced this process
