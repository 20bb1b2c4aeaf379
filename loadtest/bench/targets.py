"""The ratios between figures of the same run: fleet against the peers and against PostgreSQL's limit."""

from __future__ import annotations

import re

from loadtest.bench.report import Report

CLAIMERS_WITHIN = 0.8  # the most claimers' throughput against the best count's
GRAPHILE_DRAIN = 1.2  # fleet's drain against graphile-worker's best, both with 2 workers
SETTINGS = ("best", "defaults")
# The peers measured at their best settings and at their defaults: (key, name, every).
SET_PEERS = (("graphile_worker", "graphile-worker", "minute"), ("dbos", "DBOS Transact", "second"))
_CLAIMERS = re.compile(r"claimers\.(direct|pgbouncer)\.w(\d+)")


def add_ratios(report: Report) -> None:
    add_claimers_ratio(report)
    pgq = _best(report, "drain.pgqueuer.b10", "drain.pgqueuer.b100")
    proc = _best(report, "drain.procrastinate.c1", "drain.procrastinate.c10")
    if pgq:
        report.ratio(
            "ratio.fleet_w2_vs_pgqueuer",
            "drain: fleet (2 workers) / best pgqueuer (2 workers)",
            "drain.fleet.w2",
            pgq,
            target=">= 1",
            ok=lambda r: r >= 1.0,
        )
    if proc:
        report.ratio(
            "ratio.fleet_w2_vs_procrastinate",
            "drain: fleet (2 workers) / best procrastinate (2 workers)",
            "drain.fleet.w2",
            proc,
            target=">= 10",
            ok=lambda r: r >= 10.0,
        )
    add_peer_ratios(report)
    best_fleet = _best(report, "drain.fleet.w1", "drain.fleet.w2", "drain.fleet.w4")
    leanest = _best(report, *(f"drain.fleet.w{w}.busy_us_per_run" for w in (1, 2, 4)), lowest=True)
    for script, label in (
        ("claim_finish", "claim + finish, 2 commits"),
        ("finish_claim", "finish + claim, 1 commit"),
    ):
        if best_fleet:
            report.ratio(
                f"ratio.fleet_vs_{script}",
                f"drain: best fleet / pgbench {label}, 100 rows/claim",
                best_fleet,
                f"limit.{script}.b100",
                target=">= 0.5",
                ok=lambda r: r >= 0.5,
            )
        if leanest:
            report.ratio(
                f"ratio.busy_{script}_vs_fleet",
                f"busy CPU per run: pgbench {label}, 100 rows/claim / leanest fleet",
                f"limit.{script}.b100.busy_us_per_run",
                leanest,
            )


def add_peer_ratios(report: Report) -> None:
    """fleet against graphile-worker and DBOS, each at the better of its two settings: the drain as
    fleet / peer, the lag and the herd as peer / fleet (so that above 1 means fleet is ahead)."""
    for key, name, every in SET_PEERS:
        drain = _best(report, *(f"drain.{key}.{s}" for s in SETTINGS))
        if drain and key == "graphile_worker":
            report.ratio(
                f"ratio.fleet_w2_vs_{key}",
                f"drain: fleet (2 workers) / best {name} (2 workers)",
                "drain.fleet.w2",
                drain,
                target=f">= {GRAPHILE_DRAIN:g}",
                ok=lambda r: r >= GRAPHILE_DRAIN,
            )
        elif drain:
            report.ratio(
                f"ratio.fleet_w2_vs_{key}",
                f"drain: fleet (2 workers) / best {name} (2 workers)",
                "drain.fleet.w2",
                drain,
            )
        lag = _best(report, *(f"lag.{key}.{s}.every_{every}.p50" for s in SETTINGS), lowest=True)
        if lag:
            report.ratio(
                f"ratio.lag_{key}_vs_fleet",
                f"lag p50: best {name} (a schedule every {every}) / fleet (every second)",
                lag,
                "lag.fleet.every_second.p50",
            )
        herd = _best(report, *(f"lag.{key}.{s}.herd" for s in SETTINGS), lowest=True)
        if herd:
            report.ratio(
                f"ratio.herd_{key}_vs_fleet",
                f"1,000 due at once, slot to the last start: best {name} (2 workers) / fleet (4 workers)",
                herd,
                "lag.fleet.burst.last_start",
            )

    for key in ("pgqueuer", "procrastinate"):
        report.ratio(
            f"ratio.lag_{key}_vs_fleet",
            f"lag p50: {key} (cron every second) / fleet (every second)",
            f"lag.{key}.every_second.p50",
            "lag.fleet.every_second.p50",
        )


def add_claimers_ratio(report: Report) -> None:
    """The most worker processes against the best count, on the path every count took: through
    PgBouncer when some count needed it (then every count ran through it), else direct."""
    paths: dict[str, dict[int, str]] = {}
    for f in report.figures:
        if m := _CLAIMERS.fullmatch(f.key):
            paths.setdefault(m[1], {})[int(m[2])] = f.key
    for path in ("pgbouncer", "direct"):
        keys = paths.get(path, {})
        if len(keys) < 2 or set(keys) != set().union(*paths.values()):
            continue
        most = max(keys)
        best = _best(report, *keys.values())
        if best:
            report.ratio(
                "ratio.claimers_most_vs_best",
                f"claimers: {most} workers / the best count ({path})",
                keys[most],
                best,
                target=f">= {CLAIMERS_WITHIN:g}",
                ok=lambda r: r >= CLAIMERS_WITHIN,
            )
        return


def _best(report: Report, *keys: str, lowest: bool = False) -> str | None:
    """The key with the highest value (the lowest with `lowest`) among those measured."""
    measured = [(v, k) for k in keys if (v := report.value(k)) is not None]
    if not measured:
        return None
    return (min if lowest else max)(measured)[1]
