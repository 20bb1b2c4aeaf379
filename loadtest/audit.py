"""The audit: from the database alone, did every due slot end done or dead, and was no effect doubled?

Slots due are computed from each schedule's timing between its start and the end of the load window
(fleet.timing.schedule.slots_between), independently of `job_runs`; the runs, the attempt history, the
ledger and the executions the job recorded are then held against them. Every invariant is a Check;
the verdict holds only when all of them do. Figures (lag, reclaim delay, throughput, memory) and
per-second series for the timeline come with it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from fleet.jobs import idempotency_key
from fleet.timing.schedule import slots_between, timing_of
from loadtest.jobs import JOB, WorkArgs, is_permanent
from loadtest.measures import Key, fault_explains, percentile, reclaims, repeat_cause, series, stats
from loadtest.queries import q

EXAMPLES = 5  # offending slots shown per failed check
_SLOT_LIMIT = 10_000_000
_FINISHED = ("done", "dead", "skipped")


class AuditError(Exception):
    """The database holds no finished load test to audit."""


@dataclass
class Check:
    name: str
    value: int | float
    ok: bool
    detail: str = ""
    examples: list[str] = field(default_factory=list)


@dataclass
class AuditResult:
    settings: dict[str, Any]
    window: dict[str, Any]
    figures: dict[str, Any]
    checks: list[Check]
    faults: list[dict[str, Any]]
    reclaims: list[dict[str, Any]]
    series: dict[str, list[Any]]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": "PASS" if self.ok else "FAIL",
            "settings": self.settings,
            "window": self.window,
            "figures": self.figures,
            "checks": [c.__dict__ for c in self.checks],
            "faults": self.faults,
            "reclaims": self.reclaims,
            "series": self.series,
        }


def _show(k: Key) -> str:
    return idempotency_key(*k)


def _skip_explained(reason: str | None, sched: dict[str, Any]) -> bool:
    """A skipped run is fine only when a policy of its schedule asks for it."""
    reason = reason or ""
    return (reason.startswith("max_lateness") and sched["max_lateness"] is not None) or (
        reason.startswith("overlap") and sched["overlap"] == "skip"
    )


def audit(conn: psycopg.Connection[Any]) -> AuditResult:
    """Audit the load test in the database of `conn` (rows as dicts)."""
    meta = conn.execute(q("audit_meta")).fetchone()
    if meta is None:
        raise AuditError("this database holds no load test (no loadtest_meta row)")
    settings: dict[str, Any] = meta["settings"]
    start: datetime = meta["window_start"]
    end: datetime | None = meta["window_end"]
    notes: list[str] = []
    if end is None:
        end = conn.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
        notes.append("the run did not close its window; audited up to now")
    if meta["drain_note"]:
        notes.append(f"drain: {meta['drain_note']}")

    schedules = {r["name"]: r for r in conn.execute(q("audit_schedules"), {"job": JOB})}
    runs: dict[Key, dict[str, Any]] = {
        (r["schedule_name"], r["scheduled_for"]): r for r in conn.execute(q("audit_runs"), {"job": JOB})
    }
    attempts: dict[Key, dict[int, dict[str, Any]]] = defaultdict(dict)
    for a in conn.execute(q("audit_attempts"), {"job": JOB}):
        attempts[(a["schedule_name"], a["scheduled_for"])][a["attempt"]] = a
    ledger = conn.execute(q("audit_ledger")).fetchall()
    executions = conn.execute(q("audit_executions")).fetchall()
    faults = conn.execute(q("audit_faults")).fetchall()
    processes = conn.execute(q("audit_processes")).fetchall()

    # -- which slots were due: from the schedules' timing, not from fleet.job_runs ----------------------
    due: set[Key] = set()
    valid: set[Key] = set()
    last_row: dict[str, datetime] = {}
    for name, slot in runs:
        last_row[name] = max(last_row.get(name, end), slot)
    for name, s in schedules.items():
        until = max(end, last_row.get(name, end))
        for slot in slots_between(timing_of(s), s["start_at"] or start, until, _SLOT_LIMIT):
            valid.add((name, slot))
            if slot <= end:
                due.add((name, slot))

    status = {k: r["status"] for k, r in runs.items()}
    missing = sorted(due - runs.keys())
    unfinished = sorted(k for k in due if status.get(k) in ("pending", "running"))
    skipped_ok = sorted(
        k
        for k in runs
        if status[k] == "skipped" and _skip_explained(runs[k]["last_error"], schedules.get(k[0], {}))
    )
    skipped_bad = sorted(k for k in due if status.get(k) == "skipped" and k not in set(skipped_ok))
    phantom = sorted(k for k in runs if k not in valid)
    extra = sorted(k for k in runs if k in valid and k not in due)
    extra_open = [k for k in extra if status[k] not in _FINISHED]
    done = {k for k, s in status.items() if s == "done"}
    dead = {k for k, s in status.items() if s == "dead"}

    # -- the side effects -------------------------------------------------------------------------
    rows_per_slot: Counter[Key] = Counter()
    rows_per_key: Counter[str] = Counter()
    wrong_key: list[str] = []
    for r in ledger:
        k = (r["schedule_name"], r["scheduled_for"])
        rows_per_slot[k] += r["n"]
        rows_per_key[r["idempotency_key"]] += r["n"]
        if r["idempotency_key"] != idempotency_key(*k):
            wrong_key.append(f"{r['idempotency_key']} written for {_show(k)}")
    ledger_rows = sum(rows_per_slot.values())
    duplicates = ledger_rows - len(rows_per_slot)
    dup_examples = [f"{_show(k)}: {n} ledger rows" for k, n in rows_per_slot.items() if n > 1]
    dup_examples += [f"key {key}: {n} ledger rows" for key, n in rows_per_key.items() if n > 1]
    done_no_effect = sorted(done - rows_per_slot.keys())
    effect_not_done = sorted(k for k in rows_per_slot if k not in done)

    # -- executions: repeats (the at-least-once price), fencing tokens, who recorded done ---------
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in executions:
        by_key[e["idempotency_key"]].append(e)
    token_reuse = [
        f"{key} attempt {a}: {n} executions"
        for key, rows in by_key.items()
        for a, n in Counter(e["attempt"] for e in rows).items()
        if n > 1
    ]
    causes: Counter[str] = Counter()
    concurrent = 0
    unexplained: list[str] = []
    for rows in by_key.values():
        for prev, nxt in zip(rows, rows[1:], strict=False):
            causes[repeat_cause(prev["outcome"])] += 1
            if prev["outcome"] in (None, "cancelled", "applied", "already") and not fault_explains(
                faults, prev, nxt["started_at"]
            ):
                unexplained.append(
                    f"{prev['idempotency_key']} attempt {prev['attempt']} on {prev['worker_id']}, "
                    f"again as attempt {nxt['attempt']} on {nxt['worker_id']}"
                )
        concurrent += sum(
            1
            for i, a in enumerate(rows)
            for b in rows[i + 1 :]
            if a["finished_at"] is not None and b["started_at"] < a["finished_at"]
        )
    finished_at = {k: r["finished_at"] for k, r in runs.items() if r["status"] in ("done", "dead")}
    after_finish = [
        e
        for e in executions
        if (at := finished_at.get((e["schedule_name"], e["scheduled_for"]))) and e["started_at"] > at
    ]
    late_effects = 0  # effects attempted by an attempt after another one had taken its run over
    for e in executions:
        k = (e["schedule_name"], e["scheduled_for"])
        nxt_attempt = attempts.get(k, {}).get(e["attempt"] + 1)
        if (
            e["outcome"] in ("applied", "already")
            and nxt_attempt is not None
            and e["finished_at"] > nxt_attempt["started_at"]
        ):
            late_effects += 1
    completed = {
        (e["idempotency_key"], e["attempt"]) for e in executions if e["outcome"] in ("applied", "already")
    }
    done_unbacked = sorted(k for k in done if (idempotency_key(*k), runs[k]["attempts"]) not in completed)
    absorbed = sum(1 for e in executions if e["outcome"] == "already")

    # -- dead runs against the injected permanent failures ----------------------------------------
    perm: set[Key] = set()
    for k in runs:
        s = schedules.get(k[0])
        if s is not None and is_permanent(WorkArgs.from_args(s["args"] or {}), idempotency_key(*k)):
            perm.add(k)
    perm_due = {
        k
        for k in due
        if schedules.get(k[0]) is not None
        and is_permanent(WorkArgs.from_args(schedules[k[0]]["args"] or {}), idempotency_key(*k))
    }
    budget = {k for k in dead - perm if runs[k]["failures"] >= schedules[k[0]]["max_attempts"]}
    dead_unexplained = sorted(dead - perm - budget)
    perm_done = sorted(k for k in perm if status.get(k) in ("done", "skipped"))
    p_perm = float(settings.get("permanent", 0.0))
    expected = len(due) * p_perm
    spread = 3 * math.sqrt(len(due) * p_perm * (1 - p_perm))

    # -- reclaims after kills and stalls ---------------------------------------------------------
    lease = float(settings.get("lease_s", 60))
    bound = lease + float(settings.get("poll_s", 5))
    slack = float(settings.get("reclaim_slack_s", 0.0))
    outages = [
        (f["at"], f["ended_at"] or f["at"]) for f in faults if f["kind"] in ("pg_restart", "starvation")
    ]
    reclaim_rows = reclaims(faults, attempts, start, bound, outages)
    kill_delays = [
        r["delay_s"] for r in reclaim_rows if r["kind"] == "worker_kill" and r["delay_s"] is not None
    ]
    clean = [
        r
        for r in reclaim_rows
        if r["kind"] == "worker_kill" and r["delay_s"] is not None and not r["in_outage"]
    ]
    late = [r for r in clean if r["delay_s"] > bound + slack]
    zombie_delays = [r["delay_s"] for r in reclaim_rows if r["kind"] == "zombie" and r["delay_s"] is not None]
    restart_delays = [
        r["delay_s"] for r in reclaim_rows if r["kind"] == "worker_restart" and r["delay_s"] is not None
    ]

    # -- lag, throughput, memory -----------------------------------------------------------------
    lags = {k: (attempts[k][1]["started_at"] - k[1]).total_seconds() for k in due if 1 in attempts.get(k, {})}
    lag_values = list(lags.values())
    window_s = max((end - start).total_seconds(), 1e-9)
    done_in_window = sum(1 for k in done if runs[k]["finished_at"] and runs[k]["finished_at"] <= end)
    n_attempts = sum(len(a) for a in attempts.values())
    workers = [p for p in processes if p["kind"] == "worker"]
    tickers = [p for p in processes if p["kind"] == "ticker"]

    asked = {
        k: int(settings.get(f, 0))
        for k, f in (
            ("worker_kill", "kills"),
            ("zombie", "zombies"),
            ("worker_restart", "restarts"),
            ("ticker_kill", "ticker_kills"),
            ("pg_restart", "pg_restarts"),
            ("starvation", "starvations"),
        )
    }
    got = Counter(f["kind"] for f in faults)
    short = [f"{k}: {got.get(k, 0)} of {n}" for k, n in asked.items() if got.get(k, 0) < n]

    checks = [
        Check(
            "runs lost",
            len(missing) + len(unfinished) + len(skipped_bad),
            not (missing or unfinished or skipped_bad),
            f"due slots without a row: {len(missing)}, not finished: {len(unfinished)}, "
            f"skipped with no policy asking: {len(skipped_bad)}",
            [f"{_show(k)}: no row" for k in missing[:EXAMPLES]]
            + [f"{_show(k)}: {status[k]}" for k in (unfinished + skipped_bad)[:EXAMPLES]],
        ),
        Check(
            "runs at no slot of a schedule",
            len(phantom),
            not phantom,
            "",
            [_show(k) for k in phantom[:EXAMPLES]],
        ),
        Check(
            "runs after the window left open",
            len(extra_open),
            not extra_open,
            f"{len(extra)} runs after the window's end, created before the schedules were stopped",
            [f"{_show(k)}: {status[k]}" for k in extra_open[:EXAMPLES]],
        ),
        Check(
            "duplicate side effects",
            duplicates,
            duplicates == 0,
            f"{ledger_rows} ledger rows for {len(rows_per_slot)} slots",
            dup_examples[:EXAMPLES],
        ),
        Check("effects under a wrong key", len(wrong_key), not wrong_key, "", wrong_key[:EXAMPLES]),
        Check(
            "done runs without their effect",
            len(done_no_effect),
            not done_no_effect,
            "",
            [_show(k) for k in done_no_effect[:EXAMPLES]],
        ),
        Check(
            "effects of runs not done",
            len(effect_not_done),
            not effect_not_done,
            "",
            [f"{_show(k)}: {status.get(k, 'no row')}" for k in effect_not_done[:EXAMPLES]],
        ),
        Check(
            "runs executed after they ended",
            len(after_finish),
            not after_finish,
            "a handler started after its run was recorded done or dead",
            [
                f"{e['idempotency_key']} attempt {e['attempt']} on {e['worker_id']}"
                for e in after_finish[:EXAMPLES]
            ],
        ),
        Check(
            "done written by an unfinished attempt",
            len(done_unbacked),
            not done_unbacked,
            "a done run's attempt must be one whose handler completed the effect",
            [f"{_show(k)} attempt {runs[k]['attempts']}" for k in done_unbacked[:EXAMPLES]],
        ),
        Check(
            "fencing tokens given twice",
            len(token_reuse),
            not token_reuse,
            "two handler starts with the same attempt number of one slot",
            token_reuse[:EXAMPLES],
        ),
        Check(
            "dead runs unexplained",
            len(dead_unexplained) + len(perm_done),
            not (dead_unexplained or perm_done),
            f"{len(dead)} dead = {len(dead & perm)} injected permanent + {len(budget)} retry budget spent"
            f" + {len(dead_unexplained)} unexplained; slots failing for good not dead: {len(perm_done)}",
            [f"{_show(k)}: dead, {runs[k]['last_error']}" for k in dead_unexplained[:EXAMPLES]]
            + [f"{_show(k)}: {status[k]} although it fails for good" for k in perm_done[:EXAMPLES]],
        ),
        Check(
            "reclaims later than lease + poll",
            len(late),
            not late,
            f"bound {bound:g} s{f' + {slack:g} s slack' if slack else ''}, over {len(clean)} runs of killed "
            f"workers outside database outages",
            [
                f"{r['slot_key']}: {r['delay_s']:.2f} s after {r['target']} was killed"
                for r in late[:EXAMPLES]
            ],
        ),
        Check("faults delivered as asked", sum(got.values()), not short, ", ".join(short)),
    ]

    figures: dict[str, Any] = {
        "notes": notes,
        "schedules": len(schedules),
        "slots_due": len(due),
        "slots_per_s": round(len(due) / window_s, 2),
        "runs": len(runs),
        "runs_after_window": len(extra),
        "done": len(done),
        "dead": len(dead),
        "dead_injected_permanent": len(dead & perm),
        "dead_retry_budget": len(budget),
        "dead_retry_budget_examples": [
            f"{_show(k)}: "
            + ", ".join(f"{a['outcome']} on {a['worker_id']}" for _, a in sorted(attempts[k].items()))
            for k in sorted(budget)[:EXAMPLES]
        ],
        "dead_expected_exact": len(perm_due),
        "dead_expected_by_rate": round(expected, 1),
        "dead_expected_spread": round(spread, 1),
        "skipped_by_policy": len(skipped_ok),
        "runs_lost": len(missing) + len(unfinished) + len(skipped_bad),
        "ledger_rows": ledger_rows,
        "duplicate_side_effects": duplicates,
        "repeat_effects_absorbed": absorbed,
        "attempts": n_attempts,
        "executions": len(executions),
        "slots_executed_more_than_once": sum(1 for rows in by_key.values() if len(rows) > 1),
        "duplicate_executions": sum(len(rows) - 1 for rows in by_key.values()),
        "duplicate_executions_by_cause": dict(causes),
        "concurrent_executions_of_a_slot": concurrent,
        "effects_attempted_after_the_lease_was_taken_over": late_effects,
        "lease_losses_without_a_fault": len(unexplained),
        "lease_losses_without_a_fault_examples": unexplained[:EXAMPLES],
        "throughput_done_per_s": round(done_in_window / window_s, 2),
        "throughput_attempts_per_s": round(n_attempts / window_s, 2),
        "start_lag_s": stats(lag_values),
        "reclaim_bound_s": bound,
        "reclaim_after_kill_s": stats(kill_delays),
        "reclaim_after_kill_outside_outages_s": stats([r["delay_s"] for r in clean]),
        "reclaim_after_zombie_stop_s": stats(zombie_delays),
        "retaken_after_graceful_stop_s": stats(restart_delays),
        "faults": {k: got.get(k, 0) for k in asked},
        "faults_asked": asked,
        "pg_restart_s": [
            round((f["ended_at"] - f["at"]).total_seconds(), 2)
            for f in faults
            if f["kind"] == "pg_restart" and f["ended_at"]
        ],
        "worker_peak_rss_mb": round(max((p["peak_rss_kb"] for p in workers), default=0) / 1024, 1),
        "worker_median_peak_rss_mb": round(
            (percentile([p["peak_rss_kb"] for p in workers], 50) or 0) / 1024, 1
        ),
        "worker_processes": len(workers),
        "ticker_peak_rss_mb": round(max((p["peak_rss_kb"] for p in tickers), default=0) / 1024, 1),
    }
    window = {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "seconds": round(window_s, 1),
        "drained_at": meta["drained_at"].isoformat() if meta["drained_at"] else None,
    }
    fault_list = [
        {
            "id": f["id"],
            "kind": f["kind"],
            "target": f["target"],
            "pid": f["pid"],
            "at_s": round((f["at"] - start).total_seconds(), 3),
            "end_s": round((f["ended_at"] - start).total_seconds(), 3) if f["ended_at"] else None,
            "held": len(f["held"]),
            "detail": f["detail"],
        }
        for f in faults
    ]
    timeline = series(start, end, meta["drained_at"], runs, attempts, lags)
    return AuditResult(settings, window, figures, checks, fault_list, reclaim_rows, timeline)
