"""apply writes and compares in batches: every field survives the trip through a batch's JSON, a
batch boundary changes nothing in what is created, changed or disabled, and a failure in a later
batch leaves nothing of the earlier ones."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from fleet.admin import apply
from fleet.admin.apply import apply_specs, diff
from fleet.timing.schedfile import load, spread_offset
from tests.support import apply_text, scalar

EVERY_FIELD = """
[[schedule]]
name = "full"
cron = "15 3 * * 1-5"
timezone = "America/New_York"
job = "reports.nightly"
args = { text = "ünï \\"quoted\\" \\\\ line\\nbreak", big = 12345678901234567, ratio = 0.1, yes = true, none = [], nested = { list = [1, 2.5, "x", { deep = false }] } }
start_at = "2026-11-01T00:00:00.123456Z"
catchup = "all"
max_catchup = 77
max_lateness = "1h30m"
spread = "2m30.5s"
grace = "1.5s"
overlap = "queue"
timeout = "250ms"
dst_repeated = "last"
dst_missing = "skip"
retry = { max_attempts = 9, base = "750us", cap = "2d" }
retention = "45d"
exclude = ["2026-12-25", "2026-12-24..2026-12-26", 2027-01-01]
until = "2027-06-30T12:00:00"

[[schedule]]
name = "plain"
every = "90s"
job = "noop"
"""


def many(n: int, job: str = "noop", first: int = 0) -> str:
    return "".join(
        f'[[schedule]]\nname = "s{i:03d}"\nevery = "{i + 1}m"\njob = "{job}"\n' for i in range(first, n)
    )


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apply, "WRITE_BATCH", 3)
    monkeypatch.setattr(apply, "DEFINITIONS_BATCH", 4)


def stored(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT name, every, cron, timezone, start_at, dst_repeated, dst_missing, job, args, catchup, max_catchup,"
        " max_lateness, grace, overlap, timeout, max_attempts, retry_base, retry_cap, retention, deadline, spread,"
        " spread_offset, calendar, enabled, timing_hash"
        " FROM fleet.schedules"
    ).fetchall()
    return {r["name"]: r for r in rows}


def test_every_field_is_stored_as_the_file_gives_it(conn: psycopg.Connection[Any]) -> None:
    specs = load(EVERY_FIELD)
    assert apply_specs(conn, specs, prune=False).created == ["full", "plain"]
    rows = stored(conn)
    for spec in specs:
        assert diff(rows[spec.name], spec) == [], spec.name
        assert rows[spec.name]["timing_hash"] == spec.timing_hash()
    full = rows["full"]
    assert full["args"]["big"] == 12345678901234567 and full["args"]["text"] == 'ünï "quoted" \\ line\nbreak'
    assert full["start_at"].microsecond == 123456 and str(full["retry_base"]) == "0:00:00.000750"
    assert str(full["retention"]) == "45 days, 0:00:00" and rows["plain"]["retention"] is None
    assert full["spread"] == timedelta(minutes=2, seconds=30.5) and rows["plain"]["spread"] is None
    assert full["spread_offset"] == spread_offset("full", full["spread"]) and rows["plain"][
        "spread_offset"
    ] == timedelta(0)
    assert full["calendar"] == {
        "exclude": ["2026-12-25", "2026-12-24..2026-12-26", "2027-01-01"],
        "until": "2027-06-30T12:00:00-04:00",
    }
    assert rows["plain"]["calendar"] is None
    again = apply_text(conn, EVERY_FIELD)
    assert again.unchanged == ["full", "plain"] and not again.changes


@pytest.mark.usefixtures("small_batches")
def test_batch_boundaries_change_nothing_in_what_is_created_changed_or_disabled(
    conn: psycopg.Connection[Any],
) -> None:
    created = apply_text(conn, many(11))
    assert created.created == [f"s{i:03d}" for i in range(11)]
    assert (
        scalar(conn, "SELECT count(*) FROM fleet.schedules WHERE job = 'noop' AND next_run_at IS NOT NULL")
        == 11
    )
    # 0-4 change their job, 5-6 stay, 7-10 are left out (and pruned), 11-12 are new.
    text = many(5, job="other") + many(7, first=5) + many(13, first=11)
    r = apply_text(conn, text, prune=True)
    assert r.updated == [f"s{i:03d}" for i in range(5)] and r.unchanged == ["s005", "s006"]
    assert r.created == ["s011", "s012"] and r.disabled == ["s007", "s008", "s009", "s010"]
    assert [c.name for c in r.changes] == [*r.updated, *r.created, *r.disabled]
    rows = stored(conn)
    assert {n for n, row in rows.items() if row["job"] == "other"} == set(r.updated)
    assert {n for n, row in rows.items() if not row["enabled"]} == set(r.disabled)
    assert apply_text(conn, text, prune=True).unchanged == [*r.updated, "s005", "s006", *r.created]


@pytest.mark.usefixtures("small_batches")
def test_a_failure_in_a_later_batch_leaves_nothing_of_the_earlier_ones(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    apply_text(conn, many(2))
    before = stored(conn)
    params = apply._params

    def refused_by_the_database(spec: Any, next_run_at: Any) -> dict[str, Any]:
        p = params(spec, next_run_at)
        return {**p, "overlap": "bogus"} if spec.name == "s009" else p  # a CHECK constraint refuses it

    monkeypatch.setattr(apply, "_params", refused_by_the_database)
    with pytest.raises(psycopg.errors.CheckViolation):
        apply_text(conn, many(2, job="other") + many(11, first=2))
    assert stored(conn) == before
