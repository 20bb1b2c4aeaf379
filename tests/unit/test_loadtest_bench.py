"""The benchmark's pure parts for the herd, sustained and claimers sections: slot instants, the
schedules they apply, the command line's sizes, the connection budget, sessions sampled from
pg_stat_activity, the PgBouncer configuration."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import orjson
import pytest

from fleet.store.queries import q
from fleet.timing.schedfile import load
from fleet.timing.schedule import Timing, first_slot_at_or_after
from loadtest.bench import docs as bench_docs
from loadtest.bench.__main__ import parse
from loadtest.bench.bouncer import ini
from loadtest.bench.claimers import (
    OWN_CONNECTIONS,
    Activity,
    Capacity,
    shares,
    statement_of,
    wait_label,
    worker_of,
)
from loadtest.bench.herd import herd_toml, lead_s
from loadtest.bench.report import Report
from loadtest.bench.scheduled import iso, whole_minute_after, whole_second_after
from loadtest.bench.sustained import expected_slots, sustained_toml
from loadtest.bench.targets import add_claimers_ratio, add_ratios

UTC = dt.UTC


def _slot(timing: Timing, at: dt.datetime) -> dt.datetime:
    slot = first_slot_at_or_after(timing, at)
    assert slot is not None
    return slot


def test_whole_second_and_minute_after_round_up_past_the_lead() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 58, 250_000, tzinfo=UTC)
    assert whole_second_after(now, 10) == dt.datetime(2026, 1, 1, 12, 1, 9, tzinfo=UTC)
    assert whole_second_after(now.replace(microsecond=0), 2) == dt.datetime(2026, 1, 1, 12, 1, 0, tzinfo=UTC)
    assert whole_minute_after(now, 1) == dt.datetime(2026, 1, 1, 12, 1, tzinfo=UTC)
    assert whole_minute_after(now, 2) == dt.datetime(2026, 1, 1, 12, 2, tzinfo=UTC)
    assert whole_minute_after(now.replace(second=0, microsecond=0), 0) == now.replace(second=0, microsecond=0)


def test_the_herd_schedules_all_have_their_first_slot_at_the_herd_instant() -> None:
    slot = dt.datetime(2026, 6, 1, 8, 30, 5, tzinfo=UTC)
    specs = load(herd_toml(50, slot))
    assert len(specs) == 50 and len({s.name for s in specs}) == 50
    assert {first_slot_at_or_after(s.timing, slot - dt.timedelta(minutes=5)) for s in specs} == {slot}
    assert {first_slot_at_or_after(s.timing, slot + dt.timedelta(seconds=1)) for s in specs} == {
        slot + dt.timedelta(hours=1)
    }
    # The lead grows with the herd: applying it and materialising it both take longer.
    assert lead_s(100_000) > lead_s(5_000) > 0


def test_the_sustained_schedules_spread_over_the_minute_and_fire_once_a_minute() -> None:
    first = dt.datetime(2026, 6, 1, 8, 31, tzinfo=UTC)
    specs = load(sustained_toml(180, first))
    slots = [_slot(s.timing, first) for s in specs]
    assert {(t - first).total_seconds() for t in slots} == set(range(60))
    assert all(slots.count(first + dt.timedelta(seconds=k)) == 3 for k in range(60))
    nxt = [_slot(s.timing, t + dt.timedelta(microseconds=1)) for s, t in zip(specs, slots, strict=True)]
    assert all(b - a == dt.timedelta(minutes=1) for a, b in zip(slots, nxt, strict=True))
    assert expected_slots(180, 10) == 1_800
    assert iso(first) == "2026-06-01T08:31:00Z"


def test_new_sections_take_their_sizes_from_the_command_line_or_the_quick_defaults() -> None:
    opts, _ = parse(["--only", "herd,sustained,claimers"])
    assert (opts.herd, opts.sustained, opts.sustained_minutes, opts.claimers) == (
        100_000,
        100_000,
        10,
        (4, 16, 64),
    )
    opts, _ = parse(
        ["--quick", "--only", "herd", "--herd", "300", "--sustained-minutes", "1", "--claimers", "2, 8"]
    )
    assert (opts.herd, opts.sustained, opts.sustained_minutes, opts.claimers) == (300, 5_000, 1, (2, 8))
    # --quick leaves the sustained load out unless it is named.
    assert "sustained" not in parse(["--quick"])[0].sections and "herd" in parse(["--quick"])[0].sections


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--herd", "0"], "--herd: must be at least 1, got 0"),
        (["--sustained", "many"], "--sustained: must be a whole number, got 'many'"),
        (["--sustained-minutes", "-1"], "--sustained-minutes: must be at least 1, got -1"),
        (["--claimers", "4,x"], "--claimers: must be a whole number, got 'x'"),
        (["--claimers", ","], "--claimers: must list at least one number"),
    ],
)
def test_bad_sizes_are_refused_in_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: {message}")


def test_a_fleet_fits_when_its_connections_and_the_benchmarks_fit_in_the_free_slots() -> None:
    cap = Capacity(max_connections=100, reserved=3, in_use=8)
    assert cap.free == 89
    assert cap.fits(28) and 28 * 3 + OWN_CONNECTIONS <= 89
    assert not cap.fits(29)
    assert not cap.fits(64) and Capacity(500, 3, 8).fits(64)
    assert cap.fits(40, per_worker=2) and not cap.fits(43, per_worker=2)


def test_worker_sessions_are_told_apart_by_application_name() -> None:
    assert worker_of("fleet-worker bench-3") == "bench-3"
    assert worker_of("fleet-worker bench-3 listen") == "bench-3"
    assert worker_of("fleet-worker host:worker-9 listen") == "host:worker-9"
    assert (
        worker_of("fleet-ticker t1") is None and worker_of("") is None and worker_of("fleet-worker ") is None
    )


def test_sessions_are_named_by_the_fleet_statement_they_run() -> None:
    """pg_stat_activity shows a statement with $n for its parameters, as psycopg sends it."""
    claim = q("run_claim").replace("%(now)b", "$1").replace("%(jobs)b", "$2")
    assert statement_of(claim) == "run_claim"
    assert statement_of("  " + q("run_finish").replace("\n", "\n    ")) == "run_finish"
    assert (
        statement_of(q("run_notify")) == "run_notify"
        and statement_of(q("schedule_notify")) == "schedule_notify"
    )
    assert statement_of("COMMIT") == "COMMIT" and statement_of("") == "?" and statement_of(None) == "?"


def test_activity_keeps_the_most_sessions_seen_and_what_active_ones_wait_on() -> None:
    a = Activity("postgresql://unused", "db")
    claim, finish = q("run_claim"), q("run_finish")

    def row(
        app: str,
        state: str = "idle",
        wtype: str | None = None,
        wevent: str | None = None,
        query: str = "LISTEN fleet_runs",
        blocker: str | None = None,
    ) -> dict[str, object]:
        return {
            "app": app,
            "started": None,
            "state": state,
            "wtype": wtype,
            "wevent": wevent,
            "query": query,
            "blocker": blocker,
        }

    a.add(
        [
            row("fleet-worker w1", "active", query=claim),
            row("fleet-worker w1", "active", "Lock", "transactionid", finish, blocker=claim),
            row("fleet-worker w1 listen"),
            row("fleet-worker w2", "active", "LWLock", "WALWrite", "COMMIT"),
        ]
    )
    a.add(
        [
            row("fleet-worker w2"),
            row("fleet-worker w2 listen"),
            row("", "active", "Client", "ClientRead", claim),
        ]
    )
    a.add([])
    assert a.peak == 4 and a.per_worker == 3
    assert a.waits == {
        "run_claim CPU": 1,
        "run_finish Lock:transactionid held by run_claim": 1,
        "COMMIT LWLock:WALWrite": 1,
        "run_claim Client:ClientRead": 1,
    }
    assert wait_label(None, None) == "CPU" and wait_label("IO", "WALSync") == "IO:WALSync"


def test_activity_counts_as_a_workers_sessions_only_those_opened_since_sampling_began() -> None:
    # A pooler's server session opened in an earlier trial keeps the application_name of the last
    # client it served: it is not one more session of that worker.
    a = Activity("postgresql://unused", "db")
    a.since = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    before, after = a.since - dt.timedelta(seconds=5), a.since + dt.timedelta(seconds=1)
    a.add(
        [
            {"app": f"fleet-worker w1{suffix}", "started": started, "state": "idle", "query": ""}
            for suffix, started in (("", after), ("", after), (" listen", after), ("", before))
        ]
    )
    assert a.per_worker == 3 and a.peak == 4
    assert shares({"CPU": 3, "Lock:tuple": 1}) == "CPU 75%, Lock:tuple 25%"
    assert shares({}) == "no active session sampled"
    assert shares({"a": 1, "b": 1, "c": 1}, top=2) == "a 33%, b 33%"


def test_the_pgbouncer_configuration_pools_transactions_for_every_database() -> None:
    text = ini(
        host="127.0.0.1",
        port=5432,
        listen_port=6543,
        auth_file=Path("/tmp/x/users.txt"),
        pool_size=20,
        clients=242,
    )
    lines = text.splitlines()
    assert lines[:2] == ["[databases]", "* = host=127.0.0.1 port=5432"]
    for expected in (
        "listen_port = 6543",
        "pool_mode = transaction",
        "default_pool_size = 20",
        "max_client_conn = 242",
        "auth_file = /tmp/x/users.txt",
    ):
        assert expected in lines
    assert not any(ln.startswith("user =") for ln in lines)
    assert (
        "user = nobody"
        in ini(
            host="h", port=1, listen_port=2, auth_file=Path("u"), pool_size=1, clients=1, run_as="nobody"
        ).splitlines()
    )


def test_the_docs_page_renders_the_new_sections_with_their_targets_and_the_claimers_ratio() -> None:
    r = Report({"quick": False, "sections": ["lag", "herd", "sustained", "claimers"]})
    r.add("lag.fleet.burst.p99", "burst p99", 200.0, "ms", target="< 1000", ok=lambda v: v < 1000)
    r.add("herd.slot_to_last_start", "herd: slot to last start", 3.1, "s", target="< 5", ok=lambda v: v < 5)
    r.add("sustained.lag.p99", "sustained: p99", 2500.0, "ms", target="< 2000", ok=lambda v: v < 2000)
    for key, rate in (("direct.w4", 20_000.0), ("pgbouncer.w4", 15_000.0), ("pgbouncer.w16", 14_000.0)):
        r.add(f"claimers.{key}", f"claimers {key}", rate, "runs/s")
    r.add("claimers.pgbouncer.w64", "claimers pgbouncer.w64", 13_000.0, "runs/s")
    r.add("claimers.pgbouncer.w64.server_connections", "server connections", 20.0, "connections")
    add_ratios(r)
    (ratio,) = [f for f in r.figures if f.key == "ratio.claimers_most_vs_best"]
    # On the path every count took (PgBouncer), the 64 against the best of that path, not the direct 4.
    assert ratio.value == pytest.approx(13_000 / 15_000) and ratio.ok is True
    assert ratio.label == "claimers: 64 workers / the best count (pgbouncer)" and ratio.target == ">= 0.8"
    text = bench_docs.render(orjson.loads(r.json()), "bench.json")
    heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert heads[:4] == [
        "## Lag: from the slot's time to the handler's start",
        "## Herd: schedules due in the same second",
        "## Sustained: schedules every minute, for minutes",
        "## Claimers: many worker processes draining one backlog",
    ]
    assert "| herd: slot to last start | 3.10 | s |  | < 5 | meets |" in text
    assert "| sustained: p99 | 2,500 | ms |  | < 2000 | **misses** |" in text
    assert "3 of 4 met; missed: sustained: p99." in text


def test_no_claimers_ratio_without_a_path_that_every_count_took() -> None:
    r = Report({})
    r.add("claimers.direct.w4", "4", 20_000.0, "runs/s")
    r.add("claimers.direct.w16", "16", 18_000.0, "runs/s")
    r.add("claimers.pgbouncer.w64", "64", 9_000.0, "runs/s")  # 64 only: no series to compare it in
    add_claimers_ratio(r)
    assert not [f for f in r.figures if f.key.startswith("ratio.")]
    r2 = Report({})
    r2.add("claimers.direct.w4", "4", 20_000.0, "runs/s")
    r2.add("claimers.direct.w64", "64", 14_000.0, "runs/s")
    add_claimers_ratio(r2)
    (ratio,) = [f for f in r2.figures if f.key == "ratio.claimers_most_vs_best"]
    assert ratio.value == pytest.approx(0.7) and ratio.ok is False
