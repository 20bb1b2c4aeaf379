"""The load test's report: a table on the terminal, JSON, and a PNG timeline (matplotlib, the optional
extra `plot`) of runs per second, start lag and reclaim delay, with every fault marked where it landed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from loadtest.audit import AuditResult

FAULT_STYLE = {  # kind: (colour, label)
    "worker_kill": ("tab:red", "worker SIGKILL"),
    "zombie": ("tab:purple", "worker SIGSTOP (zombie)"),
    "worker_restart": ("tab:cyan", "worker graceful restart"),
    "ticker_kill": ("tab:orange", "ticker SIGKILL"),
    "pg_restart": ("black", "PostgreSQL restart"),
    "starvation": ("tab:gray", "connections starved"),
}


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _dist(d: dict[str, Any], unit: str = "s") -> str:
    if not d.get("n"):
        return "-"
    return (
        f"p50 {_fmt(d['p50'])} {unit}, p99 {_fmt(d['p99'])} {unit}, max {_fmt(d['max'])} {unit} (n={d['n']})"
    )


def lines(r: AuditResult) -> list[str]:
    """The report as text lines."""
    s, f, w = r.settings, r.figures, r.window
    out = [
        f"fleet load test · {w['seconds']:g} s window · {s.get('workers')} workers x {s.get('concurrency')} "
        f"· {s.get('tickers')} tickers · {f['schedules']} schedules · seed {s.get('seed')}",
        f"lease {_fmt(s.get('lease_s'))} s, heartbeat {_fmt(s.get('heartbeat_s'))} s, "
        f"poll {_fmt(s.get('poll_s'))} s"
        f" · job duration {s.get('job_duration')} (max {_fmt(s.get('job_duration_max_s'))} s)"
        f" · failures {_fmt(s.get('transient'))} transient, {_fmt(s.get('permanent'))} permanent",
        "faults: "
        + ", ".join(f"{f['faults'][k]}/{f['faults_asked'][k]} {FAULT_STYLE[k][1]}" for k in FAULT_STYLE),
        "",
    ]
    rows: list[tuple[str, str]] = [
        ("slots due", f"{f['slots_due']} ({_fmt(f['slots_per_s'])}/s)"),
        ("runs done", str(f["done"])),
        (
            "runs dead",
            f"{f['dead']} ({f['dead_injected_permanent']} injected permanent, "
            f"{f['dead_retry_budget']} retry budget spent; expected {f['dead_expected_exact']} "
            f"exactly, {_fmt(f['dead_expected_by_rate'])} ± {_fmt(f['dead_expected_spread'])} by rate)",
        ),
        ("skipped by policy", str(f["skipped_by_policy"])),
        ("runs lost", str(f["runs_lost"])),
        ("ledger rows / duplicate side effects", f"{f['ledger_rows']} / {f['duplicate_side_effects']}"),
        ("repeat effects absorbed by the key", str(f["repeat_effects_absorbed"])),
        ("attempts / handler executions", f"{f['attempts']} / {f['executions']}"),
        (
            "duplicate executions (allowed)",
            f"{f['duplicate_executions']} in {f['slots_executed_more_than_once']} "
            "slots: " + (", ".join(f"{n} {c}" for c, n in f["duplicate_executions_by_cause"].items()) or "-"),
        ),
        ("concurrent executions of one slot", str(f["concurrent_executions_of_a_slot"])),
        (
            "effects tried after losing the lease",
            f"{f['effects_attempted_after_the_lease_was_taken_over']} (absorbed by the key when it is used)",
        ),
        ("lease losses with no fault behind", str(f["lease_losses_without_a_fault"])),
        ("start lag", _dist(f["start_lag_s"])),
        (
            "reclaim after a kill",
            _dist(f["reclaim_after_kill_s"]) + f" · bound lease + poll = {_fmt(f['reclaim_bound_s'])} s",
        ),
        ("  outside database outages", _dist(f["reclaim_after_kill_outside_outages_s"])),
        ("reclaim after a zombie stop", _dist(f["reclaim_after_zombie_stop_s"])),
        ("retaken after a graceful stop", _dist(f["retaken_after_graceful_stop_s"]) + " (grace included)"),
        ("database restart", ", ".join(f"{x:g} s" for x in f["pg_restart_s"]) or "-"),
        (
            "throughput",
            f"{_fmt(f['throughput_done_per_s'])} runs done/s, "
            f"{_fmt(f['throughput_attempts_per_s'])} attempts/s",
        ),
        (
            "worker peak RSS (VmHWM)",
            f"max {_fmt(f['worker_peak_rss_mb'])} MB, median "
            f"{_fmt(f['worker_median_peak_rss_mb'])} MB over {f['worker_processes']} "
            f"processes · ticker max {_fmt(f['ticker_peak_rss_mb'])} MB",
        ),
    ]
    width = max([len(k) for k, _ in rows] + [len(c.name) for c in r.checks])
    out += [f"{k.ljust(width)}  {v}" for k, v in rows]
    out += ["", "invariant".ljust(width) + "  value  verdict"]
    for c in r.checks:
        out.append(
            f"{c.name.ljust(width)}  {str(c.value).rjust(5)}  {'ok' if c.ok else 'FAIL'}"
            + (f"  ({c.detail})" if c.detail else "")
        )
        out += [f"{'':{width}}    - {e}" for e in (c.examples if not c.ok else [])]
    out += [f"note: lease lost with no fault behind: {e}" for e in f["lease_losses_without_a_fault_examples"]]
    out += [f"note: dead with its retry budget spent: {e}" for e in f["dead_retry_budget_examples"]]
    out += [f"note: {n}" for n in f["notes"]]
    failed = [c.name for c in r.checks if not c.ok]
    out += [
        "",
        "VERDICT: PASS, every invariant holds"
        if not failed
        else f"VERDICT: FAIL ({len(failed)} invariant{'s' if len(failed) > 1 else ''} broken: "
        f"{', '.join(failed)})",
    ]
    return out


def print_report(r: AuditResult, stream: IO[str] | None = None) -> None:
    import sys

    out = stream or sys.stdout
    for line in lines(r):
        print(line, file=out)
    out.flush()


def write_json(r: AuditResult, path: Path) -> None:
    path.write_text(json.dumps(r.as_dict(), indent=1, default=str) + "\n", encoding="utf-8")


def _binned(values: list[Any], width: int, how: str) -> list[float]:
    """Per-second values in bins of `width` seconds: their mean, median or max (NaN for an empty bin)."""
    out = []
    for i in range(0, len(values), width):
        chunk = [v for v in values[i : i + width] if v is not None]
        if not chunk:
            out.append(float("nan"))
        elif how == "mean":
            out.append(sum(chunk) / len(chunk))
        elif how == "median":
            out.append(sorted(chunk)[len(chunk) // 2])
        else:
            out.append(max(chunk))
    return out


def write_png(r: AuditResult, path: Path) -> str | None:
    """Draw the timeline; returns None when done, else why not (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'fleet[plot]'): no PNG"
    s = r.series
    width = 1 if len(s["t_s"]) <= 150 else 5  # a long run is drawn in 5 s bins
    t = [float(i) for i in range(0, len(s["t_s"]), width)]
    per = "per second" if width == 1 else f"per second, {width} s means"
    fig, (ax1, ax2, ax3) = plt.subplots(
        3, 1, figsize=(14, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]}
    )
    for key, colour, lw, label in (
        ("done_per_s", "tab:green", 1.3, "runs done"),
        ("attempts_started_per_s", "tab:blue", 0.8, "attempts started"),
        ("attempts_failed_per_s", "tab:red", 0.8, "attempts failed or cut off"),
    ):
        ax1.plot(t, _binned(s[key], width, "mean"), color=colour, lw=lw, label=label, drawstyle="steps-post")
    ax1.set_ylabel(per)
    ax1.set_ylim(bottom=0)
    ax2.plot(
        t,
        _binned(s["lag_max_s"], width, "max"),
        color="tab:orange",
        lw=0.9,
        label="start lag, max",
        drawstyle="steps-post",
    )
    ax2.plot(
        t,
        _binned(s["lag_p50_s"], width, "median"),
        color="tab:blue",
        lw=0.9,
        label="start lag, median",
        drawstyle="steps-post",
    )
    ax2.set_ylabel("start lag (s), by slot time")
    ax2.set_ylim(bottom=0)
    bound = r.figures["reclaim_bound_s"]
    for kind, marker in (("worker_kill", "o"), ("zombie", "s"), ("worker_restart", "^")):
        pts = [
            (x["at_s"], x["delay_s"]) for x in r.reclaims if x["kind"] == kind and x["delay_s"] is not None
        ]
        if pts:
            ax3.scatter(
                [p[0] for p in pts],
                [p[1] for p in pts],
                s=16,
                marker=marker,
                color=FAULT_STYLE[kind][0],
                label=f"after {FAULT_STYLE[kind][1]}",
                zorder=3,
            )
    ax3.axhline(bound, color="black", ls="--", lw=0.8, label=f"lease + poll = {bound:g} s")
    ax3.set_ylabel("s until the run's next attempt")
    ax3.set_ylim(bottom=0, top=max([bound * 1.3] + [x["delay_s"] * 1.1 for x in r.reclaims if x["delay_s"]]))
    ax3.set_xlabel("seconds since the load window opened")
    end_s = r.window["seconds"]
    seen: set[str] = set()
    for ax in (ax1, ax2, ax3):
        ax.axvspan(end_s, max(t[-1] + width, end_s), color="tab:green", alpha=0.07)
        for fault in r.faults:
            kind = fault["kind"]
            colour, label = FAULT_STYLE.get(kind, ("gray", kind))
            lab = label if ax is ax1 and kind not in seen else None
            if ax is ax1:
                seen.add(kind)
            if kind == "worker_kill":
                ax.axvline(fault["at_s"], color=colour, lw=0.6, alpha=0.35, label=lab)
            elif kind in ("pg_restart", "ticker_kill"):
                ax.axvline(fault["at_s"], color=colour, lw=1.6, alpha=0.9, label=lab)
            else:
                end = fault["end_s"] if fault["end_s"] is not None else fault["at_s"]
                ax.axvspan(
                    fault["at_s"], max(end, fault["at_s"] + 0.5), color=colour, alpha=0.25, lw=0, label=lab
                )
        ax.grid(alpha=0.25)
    top = ax1.get_ylim()[1]
    for fault in r.faults:
        if fault["kind"] in ("pg_restart", "starvation", "ticker_kill"):
            text = {"pg_restart": "PG restart", "starvation": "starved", "ticker_kill": "ticker"}[
                fault["kind"]
            ]
            ax1.annotate(
                text,
                (fault["at_s"], top),
                xytext=(2, -10),
                textcoords="offset points",
                fontsize=7,
                color=FAULT_STYLE[fault["kind"]][0],
                rotation=90,
                va="top",
            )
    ax1.legend(loc="center left", fontsize=7, ncol=5, framealpha=0.9)
    ax2.legend(loc="upper left", fontsize=7)
    ax3.legend(loc="upper left", fontsize=7, ncol=4, framealpha=0.9)
    f = r.figures
    verdict = "PASS" if r.ok else "FAIL"
    fig.suptitle(
        f"fleet load test: {verdict} · {f['slots_due']} slots due, {f['done']} done, {f['dead']} dead, "
        f"{f['runs_lost']} lost, {f['duplicate_side_effects']} duplicate effects · "
        f"{sum(f['faults'].values())} faults · shaded right: the drain",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
