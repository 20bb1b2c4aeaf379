"""The figures one run measures: one table for the terminal, the same as JSON."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson


@dataclass
class Figure:
    key: str  # stable name in the JSON, e.g. "drain.fleet.w2"
    section: str
    label: str
    value: float | None
    unit: str
    trials: list[float] = field(default_factory=list)
    target: str = ""
    ok: bool | None = None  # None: no target, or not measured
    note: str = ""


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def percentile(xs: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), interpolated between closest ranks."""
    s = sorted(xs)
    if not s:
        return math.nan
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def fmt(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.1 or a == 0:
        return f"{v:.2f}"
    return f"{v:.4f}"


class Report:
    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.figures: list[Figure] = []
        self.notes: list[str] = []

    def add(
        self,
        key: str,
        label: str,
        value: float | None,
        unit: str,
        *,
        trials: Sequence[float] = (),
        target: str = "",
        ok: Callable[[float], bool] | None = None,
        note: str = "",
    ) -> Figure:
        f = Figure(
            key=key,
            section=key.split(".")[0],
            label=label,
            value=value,
            unit=unit,
            trials=[float(t) for t in trials],
            target=target,
            ok=ok(value) if ok is not None and value is not None and not math.isnan(value) else None,
            note=note,
        )
        self.figures.append(f)
        return f

    def value(self, key: str) -> float | None:
        for f in self.figures:
            if f.key == key:
                return f.value
        return None

    def ratio(
        self,
        key: str,
        label: str,
        num: str,
        den: str,
        *,
        target: str = "",
        ok: Callable[[float], bool] | None = None,
        note: str = "",
    ) -> Figure | None:
        """num / den, both measured in this run; nothing when either is missing."""
        a, b = self.value(num), self.value(den)
        if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
            return None
        return self.add(key, label, a / b, "x", target=target, ok=ok, note=note or f"{num} / {den}")

    def note(self, text: str) -> None:
        self.notes.append(text)

    def table(self) -> str:
        head = ("section", "figure", "value", "unit", "trials", "target", "")
        rows = [head]
        for f in self.figures:
            # Up to a handful inline; longer series (the reclaim kills) are in the JSON.
            if 1 < len(f.trials) <= 6:
                trials = " / ".join(fmt(t) for t in f.trials)
            else:
                trials = f"{len(f.trials)} samples in the JSON" if f.trials else ""
            verdict = {True: "meets", False: "MISSES", None: ""}[f.ok]
            rows.append((f.section, f.label, fmt(f.value), f.unit, trials, f.target, verdict))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        right = {2}
        lines = []
        for n, r in enumerate(rows):
            cells = [
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ]
            lines.append("  ".join(cells).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        out = "\n".join(lines)
        if self.notes:
            out += "\n\n" + "\n".join(f"- {n}" for n in self.notes)
        return out

    def json(self) -> bytes:
        doc = {"meta": self.meta, "figures": [asdict(f) for f in self.figures], "notes": self.notes}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def add_lags(
    report: Report, key: str, label: str, lags: Sequence[float], p50: str = "", p99: str = "", mx: str = ""
) -> None:
    ms = [x * 1000 for x in lags]
    limits = {"p50": p50, "p99": p99, "max": mx}
    values = {"p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms) if ms else float("nan")}
    for name, v in values.items():
        target = limits[name]
        report.add(
            f"{key}.{name}",
            f"{label}: {name} ({len(ms)} runs)",
            v,
            "ms",
            target=target,
            ok=_below(float(target.split()[-1])) if target else None,
        )


def _below(bound: float) -> Callable[[float], bool]:
    return lambda x: x < bound


def firing_interval(starts: Sequence[float]) -> float:
    """Mean time between consecutive firings of one schedule."""
    starts = sorted(starts)
    return (starts[-1] - starts[0]) / (len(starts) - 1) if len(starts) > 1 else float("nan")
