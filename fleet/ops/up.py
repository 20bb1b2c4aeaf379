"""`fleetctl up`: a whole fleet in this directory under supervisord, with a live view, until Ctrl-C.

Everything it starts lives in `.fleet/`: the embedded database (`pgdata/`, only when FLEET_DATABASE_URL
is unset), the environment file and supervisord configuration it renders, the logs, `up.lock`, held
while it runs so a second `up` here refuses to start, and `up.json`, through which the other commands
started here find the embedded database (see fleet.store.embedded). `fleetctl down` stops what a crashed
`up` left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg

from fleet.admin.alert_routes import AlertRoute, apply_routes, gather_all
from fleet.admin.apply import apply_specs
from fleet.declare import declared
from fleet.errors import ConfigError, UsageError
from fleet.jobs import registered
from fleet.ops import live
from fleet.ops.control import ProcInfo, Supervisor, SupervisorUnavailable
from fleet.ops.dashboard.command import RunningDashboard
from fleet.ops.dashboard.config import (
    DEFAULT_LISTEN,
    DEFAULT_REFRESH_S,
    is_loopback,
    parse_listen,
    settings_from,
)
from fleet.ops.down import left_supervisord, runs_with, stop_left_supervisord
from fleet.ops.host import default_bin_dir, default_grace
from fleet.process.apps import import_apps
from fleet.process.command_jobs import load_command_jobs
from fleet.process.envfile import render_env
from fleet.process.signals import on_stop_signal
from fleet.process.supervisor import TICKER_STOPWAIT_S, SupervisorOptions, render
from fleet.store.db import connect, redact, url_params
from fleet.store.embedded import (
    EMBEDDED_DIR,
    FLEET_DIR,
    UpState,
    embedded_pid,
    pid_alive,
    read_up_state,
    remove_up_state,
    start_embedded,
    stop_embedded,
    write_up_state,
)
from fleet.store.migrate import migrate
from fleet.store.queries import q
from fleet.timing.schedfile import ScheduleSpec, load

DEMO_APP = "fleet.examples.demo_jobs"
_READY_TIMEOUT_S = 30.0
_LOCK_PATIENCE_S = 1.0
_TTY_REFRESH_S = 1.0
_PLAIN_REFRESH_S = 5.0


def cmd_up(args: argparse.Namespace) -> int:
    if args.workers < 0:
        raise UsageError("--workers: must not be negative")
    if args.max_workers is not None and args.max_workers < args.workers:
        raise UsageError(f"--max-workers: must be at least --workers ({args.max_workers} < {args.workers})")
    base = Path.cwd()
    fleet_dir = base / FLEET_DIR
    fleet_dir.mkdir(mode=0o700, exist_ok=True)
    # its processes read .fleet/fleet.env, refused in a directory others may write
    mode = fleet_dir.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        fleet_dir.chmod(stat.S_IMODE(mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
    lock = UpLock(fleet_dir / "up.lock")
    holder = lock.acquire()
    if holder is not None:
        raise UsageError(
            f"a fleet is already up in this directory (fleetctl up, pid {holder}); "
            "stop it with Ctrl-C there, or change its size with `fleetctl scale N`"
        )
    try:
        return Up(args, base, fleet_dir).run()
    finally:
        lock.release()


class UpLock:
    """An exclusive lock on a file holding the owner's pid; the kernel drops it when the owner dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> int | None:
        """None when acquired, else the pid of the process holding it (0 if unknown)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        # Other commands look for a running `up` by taking a shared lock for an instant
        # (fleet.store.embedded.up_running): a refusal is final only when it lasts.
        end = time.monotonic() + _LOCK_PATIENCE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                text = os.read(fd, 32).decode(errors="replace").strip()
                if (text.isdigit() and pid_alive(int(text))) or time.monotonic() > end:
                    os.close(fd)
                    return int(text) if text.isdigit() else 0
                os.lseek(fd, 0, os.SEEK_SET)
                time.sleep(0.02)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return None

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None


def control_socket(fleet_dir: Path) -> Path:
    """supervisord's socket: in .fleet/, or in a private short directory when that path is too long."""
    sock = fleet_dir / "supervisor.sock"
    if len(str(sock)) <= 100:
        return sock
    digest = hashlib.sha256(str(fleet_dir).encode()).hexdigest()[:12]
    short = Path(tempfile.gettempdir()) / f"fleet-{os.getuid()}-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    st = short.lstat()
    if st.st_uid != os.getuid() or not short.is_dir() or short.is_symlink():
        raise UsageError(f"{short} is not a directory of this user; remove it")
    short.chmod(0o700)
    return short / "supervisor.sock"


def _die_with_parent() -> None:
    """In the child before exec: receive SIGTERM if `fleetctl up` dies (Linux), so nothing is orphaned."""
    if sys.platform == "linux":
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Up:
    def __init__(self, args: argparse.Namespace, base: Path, fleet_dir: Path) -> None:
        self.args = args
        self.base = base
        self.dir = fleet_dir
        self.logs = fleet_dir / "logs"
        self.conf_path = fleet_dir / "supervisord.conf"
        self.stop = threading.Event()
        self.stop_signal: signal.Signals | None = None  # the first stop signal received
        self.output_gone = False  # the reader of the output went away (`fleetctl up | head`)
        self.force = False
        self.started_db = False
        self.embedded = False
        self.sources: list[str] = []  # where the schedules to apply come from
        self.routes: list[AlertRoute] | None = None  # the alert routes of --schedules
        self.sv_proc: subprocess.Popen[bytes] | None = None
        self.sv: Supervisor | None = None
        self.sv_started = time.monotonic()  # when supervisord was started
        self.known: list[ProcInfo] = []
        self.runs_here: int | None = None  # held by this host's workers, as the live view last read it
        self.opts: SupervisorOptions | None = None
        self.dashboard: RunningDashboard | None = None

    # -- signals -------------------------------------------------------------------------------

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.stop.is_set():
            self.force = True
            return
        self.stop_signal = sig
        self.stop.set()

    def _stopped_early(self) -> bool:
        """Whether a stop came before the fleet was up. Ctrl-C then raises KeyboardInterrupt (one line,
        exit 130, once what was started is stopped), as in any other command."""
        if not self.stop.is_set():
            return False
        if self.stop_signal == signal.SIGINT:
            raise KeyboardInterrupt
        return True

    def _say(self, text: str) -> None:
        self._print(f"fleetctl up: {text}")

    def _print(self, *lines: str) -> None:
        """Write to the output; when its reader has gone (`fleetctl up | head`), stop everything as on
        a stop signal, writing nothing more."""
        if self.output_gone:
            return
        try:
            for line in lines:
                print(line)
            sys.stdout.flush()
        except BrokenPipeError:
            self.output_gone = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor at exit
            self.stop.set()

    # -- the whole run -------------------------------------------------------------------------

    def run(self) -> int:
        restore = on_stop_signal(self._on_signal, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
        try:
            code = self._run()
            return 141 if self.output_gone else code  # as a program that SIGPIPE ended
        finally:
            try:
                if self.dashboard is not None:
                    self.dashboard.stop()
                self._stop_supervisord()
            finally:
                if self.started_db:
                    self._say("stopping the embedded PostgreSQL")
                    stop_embedded(self.base)
                remove_up_state(self.base)
                restore()

    def _run(self) -> int:
        args = self.args
        apps = list(args.app) or ([] if args.jobs else [DEMO_APP])
        jobs_file = str(Path(args.jobs).absolute()) if args.jobs else None
        served = self._load_jobs(apps, jobs_file)
        specs = self._gather_schedules()
        self._clean_up_after_an_earlier_up()
        if self._stopped_early():
            return 0
        url = self._database()
        if self._stopped_early() or url is None:
            return 0
        with connect(url, "fleetctl up") as conn:
            applied = migrate(conn)
            if applied:
                self._say(f"schema migrated ({', '.join(map(str, applied))})")
            self._apply(conn, specs)
            self._warn_unserved(conn, served)
        self._write_config(url, apps, jobs_file)
        if self._stopped_early():
            return 0
        self._start_supervisord()
        self._start_dashboard(url)
        return self._watch(url)

    # -- before supervisord --------------------------------------------------------------------

    def _gather_schedules(self) -> list[ScheduleSpec] | None:
        """The schedules of --schedules and those the --app modules declare in code (imported by
        now), checked as `fleetctl apply` checks them; None when there are neither."""
        files = [Path(self.args.schedules)] if self.args.schedules else []
        in_code = declared() if self.args.app else []
        self.sources = [str(f) for f in files] + [f"--app {m}" for m in self.args.app if in_code]
        if not files and not in_code:
            return None
        specs, self.routes = gather_all(files, in_code)
        return specs

    def _load_jobs(self, apps: list[str], jobs_file: str | None) -> set[str]:
        """Import the app modules as a worker will (failing here beats workers failing under supervisord)."""
        sys.path.insert(0, str(self.base))
        try:
            import_apps(apps)  # AppImportError: one line naming the module, exit 2
            if jobs_file:
                load_command_jobs(jobs_file)
        finally:
            sys.path.remove(str(self.base))
        return set(registered())

    def _clean_up_after_an_earlier_up(self) -> None:
        """An earlier `up` here was killed before it could clean up: stop what it left running."""
        earlier = read_up_state(self.base)
        remove_up_state(self.base)  # its URL is not for the other commands until this `up` is ready
        pid = left_supervisord(self.dir)
        if pid is not None:
            self._say(f"stopping the supervisord (pid {pid}) an earlier `fleetctl up` left running")
            stop_left_supervisord(self.dir, pid, self.stop)
        if earlier is not None and earlier.started_db and embedded_pid(self.base) is not None:
            self.started_db = True  # it was ours: this `up` stops it on exit

    def _database(self) -> str | None:
        """The database's URL; None when a stop came while the embedded server was starting."""
        url: str | None = self.args.database_url or os.environ.get("FLEET_DATABASE_URL")
        if url:
            url_params(url, "--database-url" if self.args.database_url else "FLEET_DATABASE_URL")
            self._say(f"database {redact(url)}")
            write_up_state(self.base, UpState(os.getpid(), None, False))
            return url
        self.embedded = True
        running = embedded_pid(self.base) is not None
        if not running:
            self._say(f"starting the embedded PostgreSQL in {EMBEDDED_DIR}")
        url = start_embedded(self.base, self.stop)
        if url is None:
            return None
        self.started_db = self.started_db or not running
        # From here on, fleet commands started in this directory use this server.
        write_up_state(self.base, UpState(os.getpid(), url, self.started_db))
        return url

    def _apply(self, conn: psycopg.Connection[Any], specs: list[ScheduleSpec] | None) -> None:
        if specs is None:
            row = conn.execute(q("schedule_count")).fetchone()
            if row and row["n"]:
                return
            text = resources.files("fleet").joinpath("examples/schedules.toml").read_text(encoding="utf-8")
            specs, source = load(text), "the example schedules (fleet/examples/schedules.toml)"
        else:
            source = " and ".join(self.sources)
        with conn.transaction():
            r = apply_specs(conn, specs, prune=False)
            routed = apply_routes(conn, self.routes, prune=False) if self.routes else None
        changed = len(r.created) + len(r.updated) + len(r.replanned)
        self._say(
            f"applied {source}: {len(r.created)} created, {changed - len(r.created)} changed, "
            f"{len(r.unchanged)} unchanged"
        )
        if routed is not None:
            self._say(
                f"alert routes: {len(routed.created)} created, {len(routed.updated)} changed, "
                f"{len(routed.unchanged)} unchanged"
            )

    def _warn_unserved(self, conn: psycopg.Connection[Any], served: set[str]) -> None:
        for row in conn.execute(q("schedule_jobs")):
            if row["job"] not in served:
                self._say(
                    f"warning: no worker here runs job {row['job']!r} (schedules: "
                    f"{', '.join(row['schedules'])}); give its module with --app"
                )

    def _write_config(self, url: str, apps: list[str], jobs_file: str | None) -> None:
        self.logs.mkdir(exist_ok=True)
        env_path = self.dir / "fleet.env"
        fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# Written by `fleetctl up`; read by every process it starts (fleetctl exec-env).\n")
            f.write(render_env({"FLEET_DATABASE_URL": url}))
        os.chmod(env_path, 0o600)
        self.opts = SupervisorOptions(
            bin_dir=str(default_bin_dir()),
            directory=str(self.base),
            workers=self.args.workers,
            max_workers=self.args.max_workers,
            apps=tuple(apps),
            jobs_file=jobs_file,
            env_file=str(env_path),
            logs_dir=str(self.logs),
            socket=str(control_socket(self.dir)),
            pidfile=str(self.dir / "supervisord.pid"),
            grace_s=self.args.grace if self.args.grace is not None else default_grace(),
        )
        try:
            text = render(self.opts)
        except ConfigError as e:
            raise UsageError(str(e)) from None
        self.conf_path.write_text(text, encoding="utf-8")

    # -- supervisord ---------------------------------------------------------------------------

    def _start_supervisord(self) -> None:
        assert self.opts is not None
        exe = Path(self.opts.bin_dir) / "supervisord"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "supervisor.supervisord"]
        with open(self.logs / "supervisord.out", "ab") as out:
            # Its own session: a Ctrl-C in this terminal reaches only `up`, which stops things in order.
            self.sv_proc = subprocess.Popen(
                [*cmd, "-n", "-c", str(self.conf_path)],
                cwd=self.base,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.sv = Supervisor(f"unix://{self.opts.socket}")
        self.sv_started = time.monotonic()
        end = self.sv_started + _READY_TIMEOUT_S
        while not self.stop.is_set():
            try:
                self.known = self.sv.processes()
                break
            except SupervisorUnavailable:
                if self.sv_proc.poll() is not None or time.monotonic() > end:
                    raise SupervisorUnavailable(
                        f"supervisord did not start; see {self.logs / 'supervisord.out'}"
                    ) from None
                time.sleep(0.1)
        self._say(
            f"supervisord (pid {self.sv_proc.pid}) starts 1 ticker, {self.opts.workers} workers and "
            f"{self.opts.alerts} alert process; "
            f"logs in {self.logs}"
        )

    def _start_dashboard(self, url: str) -> None:
        """The web dashboard beside the live view, on a thread of this process; a port already taken
        is a warning, not a reason to stop the fleet."""
        if getattr(self.args, "no_dashboard", False):
            return
        listen = getattr(self.args, "dashboard", None) or DEFAULT_LISTEN
        try:
            settings = settings_from(
                listen=listen,
                read_only=False,
                # a fleet brought up on a machine of one's own: on loopback its dashboard acts
                # without credentials (FLEET_DASHBOARD_BASIC_AUTH still applies when set)
                local_actions=is_loopback(parse_listen(listen)[0]),
                trace_url=None,
                refresh_s=DEFAULT_REFRESH_S,
                threads=4,
                env=os.environ,
            )
            self.dashboard = RunningDashboard(settings, url)
        except UsageError as e:
            self._say(f"warning: no dashboard: {e}")
            return
        self._say(f"dashboard: {self.dashboard.describe()}")

    def _stop_supervisord(self) -> None:
        proc, sv = self.sv_proc, self.sv
        if proc is None or sv is None:
            return
        assert self.opts is not None
        if proc.poll() is None:
            with contextlib.suppress(SupervisorUnavailable):
                self.known = sv.processes()
            self._say(live.stopping_line(self.known, self.runs_here, self.opts.stopwaitsecs))
            try:
                sv.shutdown()
            except Exception:  # noqa: BLE001 - SIGTERM asks supervisord for the same orderly shutdown
                proc.send_signal(signal.SIGTERM)
            self._wait(lambda: proc.poll() is not None, self.opts.stopwaitsecs + TICKER_STOPWAIT_S + 10)
            if proc.poll() is None:
                self._say("killing supervisord and its processes")
                proc.kill()
                proc.wait(10)
        # supervisord is gone; none of its children may outlive it (it could have been killed itself).
        left = [p.pid for p in self.known if p.pid and pid_alive(p.pid) and runs_with(p.pid, "fleet")]
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        self._wait(lambda: not any(pid_alive(pid) for pid in left), self.opts.stopwaitsecs)
        for pid in left:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        self._say("stopped")

    def _wait(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Wait until `done()` or the timeout, or until a second Ctrl-C asks to hurry."""
        end = time.monotonic() + timeout_s
        while not done() and time.monotonic() < end and not self.force:
            time.sleep(0.1)

    # -- the live view -------------------------------------------------------------------------

    def _watch(self, url: str) -> int:
        assert self.sv is not None and self.sv_proc is not None and self.opts is not None
        tty = sys.stdout.isatty()
        screen = live.Screen(sys.stdout) if tty else None
        conn: psycopg.Connection[Any] | None = None
        db_label = f"embedded PostgreSQL in {EMBEDDED_DIR}" if self.embedded else redact(url)
        try:
            while not self.stop.is_set():
                if self.sv_proc.poll() is not None:
                    self._leave(screen)
                    screen = None
                    self._say(
                        f"supervisord exited (code {self.sv_proc.returncode}); "
                        f"see {self.logs / 'supervisord.log'}"
                    )
                    return 1
                snap = live.Snapshot(up_for_s=time.monotonic() - self.sv_started)
                try:
                    snap.processes = self.known = self.sv.processes()
                except SupervisorUnavailable as e:
                    snap.sv_error = str(e)
                try:
                    if conn is None or conn.closed:
                        conn = connect(url, "fleetctl up view")
                    live.read_database(conn, snap)
                    self.runs_here = snap.runs_here
                except Exception as e:  # noqa: BLE001 - shown in the view, retried next frame
                    snap.db_error = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    if conn is not None:
                        conn.close()
                    conn = None
                self._annotate_failures(snap)
                if screen is not None:
                    web = f" · dashboard {self.dashboard.address}" if self.dashboard else ""
                    header = (
                        f"fleet up · database {db_label}{web} · {time.strftime('%H:%M:%S')} · "
                        "Ctrl-C stops everything"
                    )
                    screen.draw(live.frame(snap, header))
                    self.stop.wait(_TTY_REFRESH_S)
                else:
                    self._print(*live.plain_lines(snap))
                    self.stop.wait(_PLAIN_REFRESH_S)
            return 0
        finally:
            self._leave(screen)
            if conn is not None:
                conn.close()

    def _annotate_failures(self, snap: live.Snapshot) -> None:
        """A process that gave up shows the last line of its log."""
        fixed = []
        for p in snap.processes:
            if p.state in ("FATAL", "BACKOFF"):
                tail = live.log_tail(self.logs / f"{p.name}.log")
                p = ProcInfo(p.group, p.name, p.state, p.pid, f"{p.description} · {tail}"[:200])
            fixed.append(p)
        snap.processes = fixed

    @staticmethod
    def _leave(screen: live.Screen | None) -> None:
        if screen is not None:
            screen.close()
            print()
