"""supervisord configuration for one host: tickers, alert processes and a fixed set of worker slots,
N of them started.

supervisord restarts a whole group when its `numprocs` changes, so the worker slots are rendered once at
their maximum: the first N start with supervisord (program `fleet-worker`), the others are stopped spares
(program `fleet-worker-spare`); both programs form the group `fleet-workers`, whose members
`worker_00 … worker_MM` are started and stopped one by one to scale without touching the rest.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from fleet.errors import ConfigError
from fleet.process.settings import DEFAULT_GRACE_S, check_duration

TICKER_PROGRAM = "fleet-ticker"
ALERT_PROGRAM = "fleet-alert"
WORKER_PROGRAM = "fleet-worker"
SPARE_PROGRAM = "fleet-worker-spare"
WORKER_GROUP = "fleet-workers"
DEFAULT_MAX_WORKERS = 16

# After its grace period a worker hands its runs back (waiting up to 5 s for cancelled handlers to
# stop) and flushes its last spans (a few seconds at most); supervisord's SIGKILL must come later.
STOP_MARGIN_S = 15
TICKER_STOPWAIT_S = 10  # a ticker stops at the end of its current batch
# An alert process stops once the notices it is sending are answered (or time out).
ALERT_STOPWAIT_S = 20


def worker_name(num: int) -> str:
    """The supervisord process name of worker slot `num` (also the second half of its --id)."""
    return f"worker_{num:02d}"


def slot_number(process_name: str) -> int | None:
    """The slot number of a worker process name, None for other names."""
    prefix, _, num = process_name.partition("_")
    return int(num) if prefix == "worker" and num.isdigit() else None


@dataclass(frozen=True)
class SupervisorOptions:
    """What `render` needs; every path should be absolute (supervisord resolves relative ones itself)."""

    bin_dir: str  # holds fleetctl, fleet-ticker and fleet-worker (the virtual environment's bin)
    directory: str  # working directory of every process (where app modules are importable)
    workers: int = 2  # worker slots started with supervisord
    max_workers: int | None = None  # worker slots rendered; None: max(workers, DEFAULT_MAX_WORKERS)
    tickers: int = 1
    alerts: int = 1  # `fleetctl alert` processes
    apps: tuple[str, ...] = ()
    jobs_file: str | None = None
    env_file: str | None = "/etc/fleet/fleet.env"  # None: processes get supervisord's environment only
    env_allow: tuple[str, ...] = ()  # variables beyond FLEET_*, OTEL_*, PG* the file may set
    logs_dir: str | None = None  # rotated files here; None: supervisord's stdout (or syslog)
    syslog: bool = False  # programs log to syslog: journald when supervisord runs under systemd
    socket: str = "/run/fleet/supervisor.sock"
    pidfile: str = "/run/fleet/supervisord.pid"
    user: str | None = None  # children drop to this user (when supervisord runs as root)
    grace_s: float = DEFAULT_GRACE_S
    startsecs: int = 3
    startretries: int = 10
    programs_only: bool = False  # only the program sections, to include into an existing supervisord

    @property
    def slots(self) -> int:
        return self.max_workers if self.max_workers is not None else max(self.workers, DEFAULT_MAX_WORKERS)

    @property
    def stopwaitsecs(self) -> int:
        return int(-(-self.grace_s // 1)) + STOP_MARGIN_S


def validate(o: SupervisorOptions) -> None:
    """Raise ConfigError naming the first option that cannot be rendered."""
    if o.tickers < 0:
        raise ConfigError("--tickers: must not be negative")
    if o.workers < 0:
        raise ConfigError("--workers: must not be negative")
    if not 0 <= o.alerts <= 10:
        raise ConfigError(f"--alerts: from 0 to 10, got {o.alerts}")
    if o.slots < o.workers:
        raise ConfigError(f"--max-workers: must be at least --workers ({o.slots} < {o.workers})")
    if o.slots > 100:
        raise ConfigError("--max-workers: at most 100 worker slots per host")
    if o.slots and not o.apps and not o.jobs_file:
        raise ConfigError("--app: give at least one module that registers jobs (or --jobs FILE)")
    check_duration(o.grace_s, "--grace", allow_zero=True)
    if o.syslog and o.logs_dir:
        raise ConfigError("--syslog: give either --syslog or --logs DIR")
    if len(o.socket) > 100:
        raise ConfigError(f"socket path too long for a unix socket ({len(o.socket)} > 100 bytes): {o.socket}")
    texts = [
        o.bin_dir,
        o.directory,
        *o.apps,
        *o.env_allow,
        o.jobs_file or "",
        o.env_file or "",
        o.logs_dir or "",
        o.socket,
        o.pidfile,
        o.user or "",
    ]
    for text in texts:
        # A newline would end the setting; " ;" starts a comment in supervisord's parser.
        if "\n" in text or "\r" in text or " ;" in text or "\t;" in text:
            raise ConfigError(f"cannot render {text!r} into a supervisord setting")


def _lit(value: str) -> str:
    """A literal for a supervisord setting: `%` is supervisord's expansion character."""
    return value.replace("%", "%%")


def _arg(value: str) -> str:
    """One command-line argument (supervisord splits `command` like a POSIX shell)."""
    return _lit(shlex.quote(value))


def _command(o: SupervisorOptions, exe: str, args: list[str], expanded_id: str) -> str:
    """The command line of a program: `exe` (in bin_dir) with `args` and `--id`, under exec-env."""
    parts = []
    if o.env_file:
        parts += [_arg(f"{o.bin_dir}/fleetctl"), "exec-env"]
        parts += [f"--allow={_arg(pattern)}" for pattern in o.env_allow]  # before FILE: the rest is argv
        parts += [_arg(o.env_file), "--"]
    parts += [_arg(f"{o.bin_dir}/{exe}"), *(_arg(a) for a in args), "--id", expanded_id]
    return " ".join(parts)


def _logging(o: SupervisorOptions, stem: str) -> list[str]:
    if o.syslog:
        # Under systemd supervisord's stdout is a socket, which supervisord cannot open as a file.
        return ["redirect_stderr=true", "stdout_logfile=NONE", "stdout_syslog=true"]
    if o.logs_dir is None:
        # /dev/stdout cannot be rotated, and supervisord's stdout must be a pipe (docker, `| cat`).
        return ["redirect_stderr=true", "stdout_logfile=/dev/stdout", "stdout_logfile_maxbytes=0"]
    return [
        "redirect_stderr=true",
        f"stdout_logfile={_lit(o.logs_dir)}/{stem}.log",
        "stdout_logfile_maxbytes=50MB",
        "stdout_logfile_backups=10",
    ]


def _program(o: SupervisorOptions, name: str, command: str, stem: str, **settings: object) -> list[str]:
    lines = [f"[program:{name}]", f"command={command}"]
    lines += [f"{k}={v}" for k, v in settings.items()]
    lines += [f"directory={_lit(o.directory)}"]
    if o.user:
        lines.append(f"user={_lit(o.user)}")
    lines += [
        "autorestart=true",
        f"startsecs={o.startsecs}",
        f"startretries={o.startretries}",
        "stopsignal=TERM",
        # Only the worker gets SIGTERM: it decides when its command jobs stop. SIGKILL, after
        # stopwaitsecs, takes the whole process group so no job process outlives its worker.
        "stopasgroup=false",
        "killasgroup=true",
        'environment=PYTHONUNBUFFERED="1"',
        *_logging(o, stem),
        "",
    ]
    return lines


def render(o: SupervisorOptions) -> str:
    """The configuration text; raises ConfigError for options that cannot be rendered."""
    validate(o)
    out = [
        "; fleet on one host, for supervisord (generated by `fleetctl supervisor-config`).",
        f"; Tickers: {o.tickers}. Alert processes: {o.alerts}. Worker slots: {o.slots}, of which "
        f"{o.workers} start with supervisord;",
        "; change how many run with `fleetctl scale N` (no other process restarts).",
        "",
    ]
    if not o.programs_only:
        out += [
            "[unix_http_server]",
            f"file={_lit(o.socket)}",
            "chmod=0700",
            "",
            "[supervisord]",
            "nodaemon=true",
            f"pidfile={_lit(o.pidfile)}",
        ]
        if o.logs_dir is None:
            # In the foreground and not silent, supervisord writes its own lines to its stdout.
            out += ["logfile=/dev/null", "logfile_maxbytes=0", "silent=false"]
        else:
            out += [
                f"logfile={_lit(o.logs_dir)}/supervisord.log",
                "logfile_maxbytes=50MB",
                "logfile_backups=10",
                "silent=true",
            ]
        out += [
            "",
            "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
            "",
            "[supervisorctl]",
            f"serverurl=unix://{_lit(o.socket)}",
            "",
        ]
    if o.tickers:
        cmd = _command(o, "fleet-ticker", [], "%(host_node_name)s:ticker_%(process_num)02d")
        out += _program(
            o,
            TICKER_PROGRAM,
            cmd,
            "ticker_%(process_num)02d",
            process_name="ticker_%(process_num)02d",
            numprocs=o.tickers,
            priority=100,
            autostart="true",
            stopwaitsecs=TICKER_STOPWAIT_S,
        )
    if o.alerts:
        cmd = _command(o, "fleetctl", ["alert"], "%(host_node_name)s:alert_%(process_num)02d")
        out += _program(
            o,
            ALERT_PROGRAM,
            cmd,
            "alert_%(process_num)02d",
            process_name="alert_%(process_num)02d",
            numprocs=o.alerts,
            priority=150,
            autostart="true",
            stopwaitsecs=ALERT_STOPWAIT_S,
        )
    if o.slots:
        args = [a for app in o.apps for a in ("--app", app)]
        if o.jobs_file:
            args += ["--jobs", o.jobs_file]
        args += ["--grace", f"{o.grace_s:g}"]
        cmd = _command(o, "fleet-worker", args, "%(host_node_name)s:worker_%(process_num)02d")
        programs = []
        for program, start, count, autostart in (
            (WORKER_PROGRAM, 0, o.workers, "true"),
            (SPARE_PROGRAM, o.workers, o.slots - o.workers, "false"),
        ):
            if count == 0:
                continue
            programs.append(program)
            out += _program(
                o,
                program,
                cmd,
                "worker_%(process_num)02d",
                process_name="worker_%(process_num)02d",
                numprocs=count,
                numprocs_start=start,
                priority=200,
                autostart=autostart,
                stopwaitsecs=o.stopwaitsecs,
            )
        out += [f"[group:{WORKER_GROUP}]", f"programs={','.join(programs)}", "priority=200", ""]
    return "\n".join(out)
