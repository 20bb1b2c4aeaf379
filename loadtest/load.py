"""The load: S schedules of `loadtest.work`, second-level intervals and 6-field crons, every due slot
to be run (catch-up `all`, overlap `allow`), applied through fleet's own schedules-file path."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fleet.admin.apply import apply_specs
from fleet.timing.schedfile import load
from loadtest.database import db_clock
from loadtest.jobs import JOB
from loadtest.profile import LoadConfig
from loadtest.queries import q

START_DELAY_S = 2  # the first slot comes this long after the schedules are applied


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string for these plain values


def schedules_toml(cfg: LoadConfig, start_at: datetime) -> str:
    """The schedules file of the load. Periods cycle through cfg.periods; each group of them
    alternates between `every = "Ps"` and the cron `*/P * * * * *` (seconds first)."""
    args = ", ".join(f"{k} = {_toml_value(v)}" for k, v in cfg.work_args().as_args().items())
    out = [f"# fleet load test: {cfg.schedules} schedules, {cfg.slots_per_s():.1f} slots/s\n"]
    n = len(cfg.periods)
    for i in range(cfg.schedules):
        p = cfg.periods[i % n]
        cron = (i // n) % 2 == 1
        timing = f'cron = "{"*" if p == 1 else f"*/{p}"} * * * * *"' if cron else f'every = "{p}s"'
        out.append(
            "[[schedule]]\n"
            f'name = "lt-{i:03d}-{"cron" if cron else "every"}-{p}s"\n'
            f"{timing}\n"
            f'job = "{JOB}"\n'
            f"args = {{ {args} }}\n"
            f'start_at = "{start_at.isoformat()}"\n'
            'catchup = "all"\n'
            'overlap = "allow"\n'
            f"retry = {{ max_attempts = {cfg.max_attempts}, "
            f'base = "{cfg.retry_base}", cap = "{cfg.retry_cap}" }}\n'
        )
    return "\n".join(out)


def apply_load(
    conn: psycopg.Connection[Any], cfg: LoadConfig, settings: dict[str, Any]
) -> tuple[datetime, str]:
    """Create the schedules, first slots a moment from now, and record the run; returns the window's
    start (the database's time of the first slot) and the schedules file's text."""
    now = db_clock(conn)
    start = now.replace(microsecond=0) + timedelta(seconds=START_DELAY_S + 1)
    text = schedules_toml(cfg, start)
    apply_specs(conn, load(text), prune=False)
    conn.execute(q("meta_insert"), {"settings": Jsonb(settings), "window_start": start})
    return start, text
