"""`fleetctl apply`: all or nothing, one line per problem naming the schedule and field, exit 2."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.admin import apply as apply_mod
from fleet.store.db import connect
from fleet.timing.schedfile import load
from tests.support import apply_text, env_for, fleetctl_cmd, scalar

GOOD = """
[[schedule]]
name = "keep"
every = "5m"
job = "noop"
"""


def fleetctl(db_url: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        fleetctl_cmd(*args), env=env_for(db_url), capture_output=True, text=True, timeout=60, cwd=cwd
    )


def snapshot(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM fleet.schedules ORDER BY name").fetchall()


BAD_CASES = {
    "malformed cron": ('[[schedule]]\nname = "x"\ncron = "61 * * * *"\njob = "noop"\n', ["'x'", "cron"]),
    "never-firing cron": ('[[schedule]]\nname = "x"\ncron = "0 0 30 2 *"\njob = "noop"\n', ["'x'", "cron"]),
    "cron step larger than its field": (
        '[[schedule]]\nname = "x"\ncron = "*/90 * * * *"\njob = "noop"\n',
        ["'x'", "cron: minute field: step 90"],
    ),
    "cron with a no-break space": (
        '[[schedule]]\nname = "x"\ncron = "0\u00a02 * * *"\njob = "noop"\n',
        ["'x'", "cron: white space U+00A0"],
    ),
    "zero interval": ('[[schedule]]\nname = "x"\nevery = "0s"\njob = "noop"\n', ["'x'", "every"]),
    "spread as long as the interval": (
        '[[schedule]]\nname = "x"\nevery = "5m"\nspread = "5m"\njob = "noop"\n',
        ["'x'", "spread: must be less than the interval ('5m'), got '5m'"],
    ),
    "negative spread": (
        '[[schedule]]\nname = "x"\nevery = "5m"\nspread = "-1s"\njob = "noop"\n',
        ["'x'", "spread: must not be negative"],
    ),
    "spread as long as a cron's shortest interval": (
        '[[schedule]]\nname = "x"\ncron = "0,10 * * * *"\nspread = "10m"\njob = "noop"\n',
        ["'x'", "spread: must be less than the shortest interval between two slots (10m), got 10m"],
    ),
    "negative interval": ('[[schedule]]\nname = "x"\nevery = "-5m"\njob = "noop"\n', ["'x'", "every"]),
    "unknown time zone": (
        '[[schedule]]\nname = "x"\ncron = "0 2 * * *"\ntimezone = "Mars/Olympus"\njob = "noop"\n',
        ["'x'", "timezone"],
    ),
    "both cron and every": (
        '[[schedule]]\nname = "x"\ncron = "* * * * *"\nevery = "1m"\njob = "noop"\n',
        ["'x'", "cron/every"],
    ),
    "neither cron nor every": ('[[schedule]]\nname = "x"\njob = "noop"\n', ["'x'", "cron/every"]),
    "unknown catch-up": (
        '[[schedule]]\nname = "x"\nevery = "1m"\njob = "noop"\ncatchup = "some"\n',
        ["'x'", "catchup"],
    ),
    "unknown overlap": (
        '[[schedule]]\nname = "x"\nevery = "1m"\njob = "noop"\noverlap = "maybe"\n',
        ["'x'", "overlap"],
    ),
    "bad duration": (
        '[[schedule]]\nname = "x"\nevery = "1m"\njob = "noop"\ntimeout = "ten minutes"\n',
        ["'x'", "timeout"],
    ),
    "max_attempts below 1": (
        '[[schedule]]\nname = "x"\nevery = "1m"\njob = "noop"\nretry = { max_attempts = 0 }\n',
        ["'x'", "retry.max_attempts"],
    ),
    "duplicate names": (
        '[[schedule]]\nname = "x"\nevery = "1m"\njob = "noop"\n'
        '[[schedule]]\nname = "x"\nevery = "2m"\njob = "noop"\n',
        ["'x'", "declared twice"],
    ),
    "unparsable TOML": ('[[schedule]\nname = "x"', ["bad.toml: not valid TOML"]),
    # deeper than tomllib can parse without reaching Python's recursion limit: one line, no traceback
    "arrays nested too deeply": (
        '[[schedule]]\nname = "x"\nevery = "1m"\njob = "noop"\nargs = { x = '
        + "[" * 5000
        + "]" * 5000
        + " }\n",
        ["bad.toml: not valid TOML: arrays or tables nested too deeply"],
    ),
    "unknown field": (
        '[[schedule]]\nname = "x"\nevery = "1m"\njob = "noop"\nretires = 3\n',
        ["'x'", "retires"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_file_changes_nothing_and_exits_2(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, case: str
) -> None:
    apply_text(conn, GOOD)
    before = snapshot(conn)
    text, needles = BAD_CASES[case]
    f = tmp_path / "bad.toml"
    # The good schedule comes first and would be changed (its interval), were anything written.
    f.write_text(GOOD.replace('"5m"', '"7m"') + text)
    done = fleetctl(db_url, "apply", str(f), "--prune")
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert lines and all(line.startswith("fleetctl apply: ") for line in lines), done.stderr
    assert any(all(n in line for n in needles) for line in lines), (needles, lines)
    assert snapshot(conn) == before


def test_every_problem_is_reported_at_once(db_url: str, tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(
        '[[schedule]]\nname = "a"\nevery = "0s"\njob = "noop"\n'
        '[[schedule]]\nname = "b"\ncron = "bad"\njob = "noop"\ntimezone = "Nowhere/City"\n'
    )
    done = fleetctl(db_url, "apply", str(f))
    assert done.returncode == 2
    text = done.stderr
    assert "'a': every" in text and "'b': timezone" in text


def test_apply_creates_updates_replans_and_prunes(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        GOOD + '[[schedule]]\nname = "other"\ncron = "0 2 * * *"\ntimezone = "Europe/Berlin"\njob = "x"\n'
    )
    first = fleetctl(db_url, "apply", str(f))
    assert first.returncode == 0, first.stderr
    assert "created: keep, other" in first.stdout
    again = fleetctl(db_url, "apply", str(f))
    assert "created 0, updated 0, replanned 0, unchanged 2, disabled 0" in again.stdout
    f.write_text(GOOD.replace('job = "noop"', 'job = "noop2"'))
    third = fleetctl(db_url, "apply", str(f), "--prune")
    assert "updated: keep" in third.stdout and "disabled: other" in third.stdout
    assert scalar(conn, "SELECT enabled FROM fleet.schedules WHERE name = 'other'") is False
    f.write_text(GOOD.replace('"5m"', '"10m"'))
    fourth = fleetctl(db_url, "apply", str(f))
    assert "replanned: keep" in fourth.stdout
    nxt = scalar(conn, "SELECT next_run_at FROM fleet.schedules WHERE name = 'keep'")
    assert nxt.timestamp() % 600 == 0


def test_apply_from_missing_file_exits_2(db_url: str, tmp_path: Path) -> None:
    done = fleetctl(db_url, "apply", str(tmp_path / "nope.toml"))
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_migrate_twice_and_concurrently_is_safe(db_url: str, conn: psycopg.Connection[Any]) -> None:
    procs = [
        subprocess.Popen(
            fleetctl_cmd("migrate"),
            env=env_for(db_url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert scalar(conn, "SELECT count(*) FROM fleet.migrations") >= 1


def test_an_interrupt_between_pipelined_writes_cancels_the_one_waiting_for_a_lock(
    db_url: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    two = '[[schedule]]\nname = "a"\nevery = "{0}"\njob = "noop"\n[[schedule]]\nname = "b"\nevery = "{0}"\njob = "noop"\n'
    apply_text(conn, two.format("1h"))
    monkeypatch.setattr(apply_mod, "WRITE_BATCH", 1)
    made = 0

    def params(*args: Any) -> Any:  # Ctrl-C while the second statement is made
        nonlocal made
        made += 1
        if made == 2:
            time.sleep(0.5)  # the first, sent, now waits for the row locked below
            raise KeyboardInterrupt
        return real(*args)

    real = apply_mod._params
    monkeypatch.setattr(apply_mod, "_params", params)
    specs = load(two.format("2h"))
    with connect(db_url, "test blocker") as blocker, blocker.transaction(), connect(db_url, "test") as c:
        blocker.execute("SELECT 1 FROM fleet.schedules WHERE name = 'a' FOR UPDATE")
        rescue = threading.Timer(10, c.cancel_safe)  # what the test waits at most
        rescue.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            apply_mod.apply_specs(c, specs, prune=False)
        took = time.monotonic() - started
        rescue.cancel()
    assert took < 5, f"the interrupted apply waited {took:.1f} s for the locked row"
    assert scalar(conn, "SELECT count(*) FROM fleet.schedules WHERE every = '1 hour'") == 2


def test_catching_up_every_slot_while_skipping_overlaps_is_warned_of_when_applied(
    db_url: str, tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        '[[schedule]]\nname = "both"\nevery = "1m"\njob = "noop"\ncatchup = "all"\n'  # overlap skip: the default
        '[[schedule]]\nname = "queued"\nevery = "1m"\njob = "noop"\ncatchup = "all"\noverlap = "queue"\n'
        '[[schedule]]\nname = "latest"\nevery = "1m"\njob = "noop"\n'
    )
    warning = (
        'fleetctl apply: warning: schedule \'both\': catchup = "all" with overlap = "skip": after an outage its '
        'missed slots come due together and skip one another, so not all of them run; overlap = "queue" runs '
        "each in turn"
    )
    for args in (("--plan",), ()):  # planned, then applied: said both times
        done = fleetctl(db_url, "apply", str(f), *args)
        assert done.returncode == 0 and warning in done.stderr.splitlines(), done.stderr
        assert "'queued'" not in done.stderr and "'latest'" not in done.stderr
    done = fleetctl(db_url, "apply", str(f))  # unchanged: said once, when it was applied
    assert done.returncode == 0 and "catchup" not in done.stderr, done.stderr


def test_a_plan_says_what_it_would_do_to_the_alert_routes_and_writes_none(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    f = tmp_path / "s.toml"
    f.write_text(GOOD + '[[alert]]\nname = "hook"\nkind = "webhook"\nurl_env = "FLEET_TEST_HOOK_URL"\n')
    done = fleetctl(db_url, "apply", str(f), "--plan")
    assert done.returncode == 0, done.stderr
    assert (
        "alert routes: would create hook; plan: created 1, updated 0, unchanged 0, removed 0; nothing was written"
        in done.stdout.splitlines()
    ), done.stdout
    assert scalar(conn, "SELECT count(*) FROM fleet.alert_routes") == 0
