"""What a worker says at start about the schedules its application's code declares: those the
database lacks or holds otherwise, field by field; declarations that are not valid; nothing when
the database holds them as declared."""

from __future__ import annotations

from typing import Any

import psycopg

import fleet
from fleet.worker.declared import SHOWN, apply_command, declared_drift
from tests.support import apply_text


def test_nothing_is_said_when_the_database_holds_the_declarations(conn: psycopg.Connection[Any]) -> None:
    declared = [fleet.Every("5m", name="same", job="j", args={"a": 1})]
    apply_text(conn, '[[schedule]]\nname = "same"\nevery = "5m"\njob = "j"\nargs = { a = 1 }\n')
    assert declared_drift(conn, declared, ["app"]) is None
    assert declared_drift(conn, [], ["app"]) is None


def test_a_disabled_schedule_and_changed_policies_are_named_with_both_values(
    conn: psycopg.Connection[Any],
) -> None:
    apply_text(conn, '[[schedule]]\nname = "off"\nevery = "5m"\njob = "j"\n')
    conn.execute("UPDATE fleet.schedules SET enabled = false")
    apply_text(conn, '[[schedule]]\nname = "policy"\nevery = "1h"\njob = "j"\n')
    declared = [
        fleet.Every("5m", name="off", job="j"),
        fleet.Every("1h", name="policy", job="j", overlap="queue", retry={"max_attempts": 3}),
    ]
    drift = declared_drift(conn, declared, ["myapp.jobs", "other"])
    assert drift is not None
    assert drift["command"] == "fleetctl apply --app myapp.jobs --app other"
    assert drift["schedules"] == [
        {
            "schedule": "off",
            "change": "replan",
            "fields": [{"field": "enabled", "database": "false", "code": "true"}],
        },
        {
            "schedule": "policy",
            "change": "update",
            "fields": [
                {"field": "overlap", "database": "'skip'", "code": "'queue'"},
                {"field": "retry.max_attempts", "database": "6", "code": "3"},
            ],
        },
    ]


def test_many_are_counted_past_a_screenful(conn: psycopg.Connection[Any]) -> None:
    declared = [fleet.Every("5m", name=f"new-{i:02d}", job="j") for i in range(SHOWN + 5)]
    drift = declared_drift(conn, declared, ["app"])
    assert drift is not None
    assert len(drift["schedules"]) == SHOWN and drift["more"] == 5
    assert drift["message"].startswith(f"{SHOWN + 5} schedule(s) declared in the code differ")


def test_declarations_that_are_not_valid_are_named_and_the_worker_is_told_what_says_why(
    conn: psycopg.Connection[Any],
) -> None:
    declared = [fleet.Every("-5m", name="bad", job="j"), fleet.Every("5m", name="good", job="j")]
    drift = declared_drift(conn, declared, ["app"])
    assert drift is not None and "schedules" not in drift
    (line,) = drift["invalid"]
    assert "schedule 'bad': every:" in line and "test_declared_drift.py:" in line
    assert drift["command"] == apply_command(["app"]) == "fleetctl apply --app app"
