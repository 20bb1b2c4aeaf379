"""The embedded PostgreSQL (pgserver) used when FLEET_DATABASE_URL is unset, shared per directory."""

from __future__ import annotations

import logging
import subprocess
import warnings
from pathlib import Path

EMBEDDED_DIR = Path(".fleet") / "pgdata"


def embedded_url(base_dir: Path | None = None) -> str:
    """Start (or join) the embedded server in `<base_dir>/.fleet/pgdata` and return its libpq URI.

    The server outlives this process: every fleet process started in the same directory shares it,
    and `stop_embedded` (used by `fleetctl up` on exit and by the tests) stops it.
    """
    pgdata = ((base_dir or Path.cwd()) / EMBEDDED_DIR).resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(pgdata, cleanup_mode=None)  # type: ignore[attr-defined]
    return str(server.get_uri())


def stop_embedded(base_dir: Path | None = None) -> bool:
    """Stop the embedded server of `base_dir` if it runs; True when one was stopped."""
    pgdata = ((base_dir or Path.cwd()) / EMBEDDED_DIR).resolve()
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return False
    import pgserver

    bindir = Path(pgserver.__file__).parent / "pginstall" / "bin"
    cmd = as_user(pgdata.owner(), [str(bindir / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode == 0


def as_user(user: str, cmd: list[str]) -> list[str]:
    """`cmd` run as `user` (through `su`) unless that is who runs this process: PostgreSQL's tools
    run as the owner of their data directory, never as root."""
    import os
    import pwd
    import shlex

    if user == pwd.getpwuid(os.geteuid()).pw_name:
        return cmd
    return ["su", user, "-s", "/bin/sh", "-c", " ".join(shlex.quote(c) for c in cmd)]
