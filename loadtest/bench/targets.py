"""The ratios between figures of the same run: fleet against the peers and against PostgreSQL's limit."""

from __future__ import annotations

from loadtest.bench.report import Report


def add_ratios(report: Report) -> None:
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
    best_fleet = _best(report, "drain.fleet.w1", "drain.fleet.w2", "drain.fleet.w4")
    if best_fleet:
        for key, label in (
            ("limit.claim_finish.b100", "claim + finish, 2 commits"),
            ("limit.finish_claim.b100", "finish + claim, 1 commit"),
        ):
            report.ratio(
                f"ratio.fleet_vs_{key.split('.')[1]}",
                f"drain: best fleet / pgbench {label}, 100 rows/claim",
                best_fleet,
                key,
                target=">= 0.5",
                ok=lambda r: r >= 0.5,
            )


def _best(report: Report, *keys: str) -> str | None:
    """The key with the highest value among those measured."""
    measured = [(v, k) for k in keys if (v := report.value(k)) is not None]
    return max(measured)[1] if measured else None
