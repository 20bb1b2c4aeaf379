"""One import name, proven on the built wheel: `fleet` is its only top-level package (no `ticker`,
`worker`, `ops` or `loadtest` to shadow an application's modules), with its SQL, migrations, example
files and py.typed inside."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support import ROOT

# Left out of the copy that is built: a `build/` left by an earlier build would add stale files.
NOT_SOURCE = (".git", ".venv", ".fleet", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")


def build_wheel(tmp: Path) -> zipfile.ZipFile:
    """The wheel of a clean copy of the repository, built offline with the setuptools installed here."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    out = tmp / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("fleet-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_wheel_installs_fleet_alone_with_its_data_files(tmp_path: Path) -> None:
    with build_wheel(tmp_path) as whl:
        names = whl.namelist()
        (dist_info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        assert {n.split("/")[0] for n in names} == {"fleet", dist_info}
        assert whl.read(f"{dist_info}/top_level.txt").decode().split() == ["fleet"]
        scripts = whl.read(f"{dist_info}/entry_points.txt").decode()
        for line in (
            "fleet-ticker = fleet.ticker:main",
            "fleet-worker = fleet.worker:main",
            "fleetctl = fleet.ops:main",
        ):
            assert line in scripts, scripts
    packed = set(names)
    for role in ("ticker", "worker", "ops"):
        assert f"fleet/{role}/__init__.py" in packed and f"fleet/{role}/cli.py" in packed
    assert not [n for n in packed if n.startswith(("ticker/", "worker/", "ops/", "loadtest/", "tests/"))]
    data = {
        p.relative_to(ROOT).as_posix()
        for pattern in ("sql/*.sql", "migrations/*.sql", "examples/*.toml", "py.typed")
        for p in (ROOT / "fleet").glob(pattern)
    }
    assert {"fleet/py.typed", "fleet/examples/schedules.toml", "fleet/migrations/001_initial.sql"} <= data
    assert data <= packed, sorted(data - packed)
