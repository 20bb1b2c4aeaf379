"""Schedules that the application's code declares and the database does not hold as declared: a
worker says so once, when it starts, since only `fleetctl apply` writes schedules."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import psycopg

from fleet.admin.apply import compare_specs
from fleet.declare import Schedule, gather
from fleet.errors import ScheduleFileError

# Schedules (or problems) named in the event; the rest are counted.
SHOWN = 20


def apply_command(apps: Sequence[str]) -> str:
    """The command that applies what the modules `apps` declare."""
    return shlex.join(["fleetctl", "apply", *(arg for app in apps for arg in ("--app", app))])


def declared_drift(
    conn: psycopg.Connection[Any], schedules: Sequence[Schedule], apps: Sequence[str]
) -> dict[str, Any] | None:
    """The fields of a `declared_schedules_differ` event: each declared schedule that the database
    lacks or holds otherwise (with the fields that differ, the database's value and the code's), or
    the declarations that are not valid; None when the database holds them all as declared."""
    if not schedules:
        return None
    command = apply_command(apps)
    try:
        specs = gather([], schedules)
    except ScheduleFileError as e:
        return {
            "invalid": e.problems[:SHOWN],
            "more": max(0, len(e.problems) - SHOWN),
            "command": command,
            "message": f"schedules declared in the code are not valid: {command} says why and applies none",
        }
    changes = compare_specs(conn, specs)
    if not changes:
        return None
    shown = [
        {
            "schedule": c.name,
            "change": c.outcome,
            "fields": [{"field": f.field, "database": f.old, "code": f.new} for f in c.fields],
        }
        for c in changes[:SHOWN]
    ]
    return {
        "schedules": shown,
        "more": max(0, len(changes) - SHOWN),
        "command": command,
        "message": f"{len(changes)} schedule(s) declared in the code differ from the database's, which "
        f"runs them as stored until they are applied: {command}",
    }
