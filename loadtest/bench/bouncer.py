"""A PgBouncer in transaction mode in front of the server under test, for a fleet that needs more
connections than the server allows: started on a free loopback port, stopped with the benchmark."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from loadtest.bench.config import Bench
from loadtest.bench.server import wait_until

PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
# Server connections per database and user: a few per core of the server (here, this machine's)
# keep it busy while clients come and go, as the docs advise; more only queue inside PostgreSQL
# instead of inside PgBouncer (measured: 64 workers drained about 13% faster, at 15% less CPU per
# run, through 6 server connections than through 20 on two cores).
POOL_PER_CORE = 3
POOL_SIZE = POOL_PER_CORE * (os.cpu_count() or 2)
# What a fleet behind it sets: no prepared statements (PgBouncer before 1.22), and a short poll,
# since no LISTEN session survives transaction pooling to wake the workers.
WORKER_FLAGS = ("--no-prepared-statements", "--poll", "0.1")


def ini(
    *, host: str, port: int, listen_port: int, auth_file: Path, pool_size: int, clients: int, run_as: str = ""
) -> str:
    """pgbouncer.ini for every database of `host:port`, transaction pooling, trusted local clients."""
    return (
        "[databases]\n"
        f"* = host={host} port={port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen_port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {auth_file}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = {clients}\n"
        + (f"user = {run_as}\n" if run_as else "")
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2, autocommit=True) as c:
            c.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


@contextlib.contextmanager
def bouncer(bench: Bench, url: str, clients: int, pool_size: int = POOL_SIZE) -> Iterator[str]:
    """A PgBouncer in front of the server of `url` for up to `clients` client connections; yields
    `url` through it."""
    if PGBOUNCER is None:
        raise RuntimeError("pgbouncer is not installed (Debian package pgbouncer)")
    given = conninfo_to_dict(url)
    host = str(given.get("host") or "/var/run/postgresql")
    user = str(given.get("user") or pwd.getpwuid(os.getuid()).pw_name)
    workdir = Path(tempfile.mkdtemp(prefix="fleet-bench-pgbouncer-", dir="/tmp"))
    try:
        workdir.chmod(0o755)  # read by the user PgBouncer switches to when run as root
        (workdir / "users.txt").write_text(f'"{user}" ""\n')
        run_as = ""
        if os.getuid() == 0:  # PgBouncer refuses to run as root; a socket directory admits its owner
            owner = os.stat(host).st_uid if host.startswith("/") else pwd.getpwnam("nobody").pw_uid
            run_as = pwd.getpwuid(owner).pw_name
        listen_port = _free_port()
        (workdir / "pgbouncer.ini").write_text(
            ini(
                host=host,
                port=int(given.get("port") or 5432),
                listen_port=listen_port,
                auth_file=workdir / "users.txt",
                pool_size=pool_size,
                clients=clients,
                run_as=run_as,
            )
        )
        proc = bench.procs.start(
            [PGBOUNCER, str(workdir / "pgbouncer.ini")], dict(os.environ), bench.log("pgbouncer")
        )
        try:
            through = make_conninfo(url, host="127.0.0.1", port=str(listen_port))
            wait_until(
                lambda: _answers(through), 15, f"pgbouncer on port {listen_port}", 0.1, bench.procs, [proc]
            )
            yield through
        finally:
            bench.procs.stop([proc])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
