"""`python -m loadtest [run] ...`: a real fleet under load and faults, then an audit and a verdict.
`python -m loadtest audit --database-url URL`: audit a finished load test's database again.

Exit codes: 0 every invariant holds, 1 an invariant is broken, 2 the load test could not run.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import psycopg

from loadtest.audit import AuditError
from loadtest.profile import PROFILES, LoadConfig
from loadtest.run import RunOptions, audit_only, run

# flag: (LoadConfig field, type, help)
_FLAGS: list[tuple[str, str, Any, str]] = [
    ("--duration", "duration_s", float, "seconds of load with faults (the window)"),
    ("--schedules", "schedules", int, "schedules of the load job"),
    ("--periods", "periods", str, "their periods in seconds, comma-separated, cycled (1,2,3)"),
    (
        "--job-duration",
        "job_duration",
        str,
        "the work's duration: fixed:S, uniform:A:B, exp:MEAN, lognormal:MED:SIGMA",
    ),
    ("--job-duration-max", "job_duration_max_s", float, "cap on the work's duration, s"),
    ("--transient", "transient", float, "probability that an attempt fails and is retried"),
    ("--permanent", "permanent", float, "probability that a slot fails for good (dead)"),
    ("--max-attempts", "max_attempts", int, "retry budget of the load schedules"),
    ("--retry-base", "retry_base", str, "retry backoff base of the load schedules (500ms)"),
    ("--retry-cap", "retry_cap", str, "retry backoff cap of the load schedules (2s)"),
    ("--workers", "workers", int, "worker processes under supervisord"),
    ("--tickers", "tickers", int, "ticker processes under supervisord"),
    ("--concurrency", "concurrency", int, "handler threads per worker"),
    ("--claim-batch", "claim_batch", int, "most runs a worker claims at once"),
    ("--lease", "lease_s", float, "worker lease, s"),
    ("--heartbeat", "heartbeat_s", float, "worker heartbeat period, s"),
    ("--poll", "poll_s", float, "worker poll interval, s"),
    ("--ticker-poll", "ticker_poll_s", float, "ticker poll interval, s"),
    ("--grace", "grace_s", float, "worker grace period on SIGTERM, s"),
    ("--seed", "seed", int, "seed of the fault moments, targets, durations and failures"),
    ("--kills", "kills", int, "worker SIGKILLs"),
    ("--zombies", "zombies", int, "workers stopped (SIGSTOP) past their lease, then continued"),
    ("--zombie-seconds", "zombie_s", float, "how long a zombie stays stopped (lease + poll + 1)"),
    ("--restarts", "restarts", int, "graceful worker restarts through supervisord (SIGTERM, hand-back)"),
    ("--ticker-kills", "ticker_kills", int, "ticker SIGKILLs"),
    ("--pg-restarts", "pg_restarts", int, "PostgreSQL restarts (embedded, or --pg-restart-cmd)"),
    ("--starvations", "starvations", int, "times all free connections are taken"),
    ("--starve-seconds", "starve_s", float, "how long a starvation lasts"),
    ("--starve-keep", "starve_keep", int, "connections left free while starving"),
    ("--drain-timeout", "drain_timeout_s", float, "longest wait for the drain, s"),
]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtest",
        description="Put a real fleet (tickers and workers under supervisord) under load and faults, then "
        "audit the database: no slot lost, none doubled in effect. Exit 0 only when every invariant holds.",
    )
    sub = p.add_subparsers(dest="command")
    r = sub.add_parser(
        "run",
        help="run a load test (the default command)",
        description="Run a load test; unset flags take the profile's values.",
    )
    r.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="short",
        help="preset: short (60 s, 4 workers, 24 kills) or long (10 min, 8 workers)",
    )
    for flag, _field, typ, text in _FLAGS:
        metavar = "P" if "probability" in text else {float: "S", int: "N"}.get(typ, "TEXT")
        r.add_argument(flag, type=typ, help=text, metavar=metavar)
    r.add_argument(
        "--unsafe-effects",
        action="store_true",
        help="the job writes its effect without the idempotency key (the audit must then fail)",
    )
    r.add_argument(
        "--database-url", help="use this server (a fresh database on it) instead of the embedded one"
    )
    r.add_argument("--in-place", action="store_true", help="with --database-url: use that database itself")
    r.add_argument("--pg-restart-cmd", help="shell command that restarts the server of --database-url")
    r.add_argument(
        "--workdir",
        type=Path,
        help="directory for configuration, logs and the embedded database, kept afterwards "
        "(default: a new one in /tmp, removed at the end)",
    )
    r.add_argument(
        "--keep-database",
        action="store_true",
        help="leave the embedded PostgreSQL running afterwards, to audit it again",
    )
    r.add_argument(
        "--reclaim-slack",
        type=float,
        default=0.0,
        help="seconds a reclaim may exceed lease + poll before it counts as late (0)",
    )
    _outputs(r)
    a = sub.add_parser(
        "audit",
        help="audit a finished load test's database",
        description="Audit the database of a finished load test; exit 0 when every invariant holds.",
    )
    a.add_argument("--database-url", required=True, help="the load test's database (libpq URI)")
    _outputs(a)
    return p


def _outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, help="write the report as JSON to this file")
    p.add_argument("--png", type=Path, help="draw the timeline to this PNG (needs matplotlib: fleet[plot])")


def config_from(args: argparse.Namespace) -> LoadConfig:
    cfg = PROFILES[args.profile]
    changes: dict[str, Any] = {}
    names = {f.name for f in fields(LoadConfig)}
    for flag, name, _typ, _text in _FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is None:
            continue
        assert name in names
        if name == "periods":
            try:
                value = tuple(int(x) for x in str(value).split(",") if x.strip())
            except ValueError:
                raise SystemExit(
                    f"loadtest: --periods: whole seconds, comma-separated, got {value!r}"
                ) from None
        changes[name] = value
    if args.unsafe_effects:
        changes["unsafe_effects"] = True
    return replace(cfg, **changes)


def main(argv: list[str] | None = None) -> int:
    # pgserver asks platformdirs for a runtime directory, which warns when XDG_RUNTIME_DIR is unset.
    warnings.filterwarnings("ignore", module="platformdirs")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("run", "audit", "-h", "--help"):
        argv = ["run", *argv]
    args = _parser().parse_args(argv)
    if args.command == "audit":
        try:
            return audit_only(args.database_url, args.json, args.png)
        except (AuditError, psycopg.Error) as e:
            print(f"loadtest audit: {str(e).strip()}", file=sys.stderr)
            return 2
    cfg = config_from(args)
    problems = cfg.validate()
    if args.in_place and not args.database_url:
        problems.append("--in-place: only with --database-url")
    if problems:
        for line in problems:
            print(f"loadtest: {line}", file=sys.stderr)
        return 2
    opts = RunOptions(
        workdir=args.workdir.absolute() if args.workdir else None,
        database_url=args.database_url or None,
        in_place=args.in_place,
        pg_restart_cmd=args.pg_restart_cmd,
        keep_database=args.keep_database,
        json_path=args.json,
        png_path=args.png,
        reclaim_slack_s=args.reclaim_slack,
    )
    try:
        return run(cfg, opts)
    except Exception as e:  # noqa: BLE001 - whatever stopped the run is reported in one line
        print(f"loadtest: the load test could not run: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
