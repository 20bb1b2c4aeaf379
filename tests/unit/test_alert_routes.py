"""The [[alert]] tables of the schedules file: defaults, what each kind needs, one line per problem
naming the route and field, and a file with routes is still a schedules file."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from fleet.admin.alert_routes import DEFAULT_VERDICTS, gather_all, load_routes
from fleet.errors import ScheduleFileError
from fleet.timing.schedfile import load

FILE = """
[[schedule]]
name = "nightly"
cron = "0 2 * * *"
job = "reports.nightly"
deadline = "45m"

[[alert]]
name = "ops-slack"
kind = "slack"
url_env = "FLEET_ALERT_SLACK_URL"
schedules = ["reports.*", "nightly"]
verdicts = ["LATE", "DEAD", "OVERDUE"]
repeat = "4h"
mention = "<!here>"

[[alert]]
name = "oncall-mail"
kind = "email"
smtp_host = "smtp.example.com"
smtp_user = "fleet"
smtp_password_env = "FLEET_ALERT_SMTP_PASSWORD"
from = "fleet@example.com"
to = "oncall@example.com"
recovery = false

[[alert]]
name = "hook"
kind = "webhook"
url_env = "FLEET_ALERT_HOOK"
secret_env = "FLEET_ALERT_HOOK_SECRET"
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ScheduleFileError) as e:
        load_routes(text)
    return e.value.problems


def test_routes_and_their_defaults() -> None:
    slack, mail, hook = load_routes(FILE)
    assert (slack.kind, slack.schedules, slack.verdicts) == (
        "slack",
        ("reports.*", "nightly"),
        ("DEAD", "OVERDUE", "LATE"),
    )
    assert slack.repeat == timedelta(hours=4) and slack.recovery
    assert slack.target == {"url_env": "FLEET_ALERT_SLACK_URL", "mention": "<!here>"}
    assert slack.covers("reports.daily") and slack.covers("nightly") and not slack.covers("nightly2")
    assert mail.schedules == ("*",) and mail.verdicts == DEFAULT_VERDICTS and not mail.recovery
    assert mail.target == {
        "to": ["oncall@example.com"],
        "from": "fleet@example.com",
        "smtp_host": "smtp.example.com",
        "smtp_security": "starttls",
        "smtp_port": 587,
        "smtp_user": "fleet",
        "smtp_password_env": "FLEET_ALERT_SMTP_PASSWORD",
        "subject_prefix": "[fleet]",
    }
    assert hook.target == {"url_env": "FLEET_ALERT_HOOK", "secret_env": "FLEET_ALERT_HOOK_SECRET"}
    assert "OVERDUE" in DEFAULT_VERDICTS and "LATE" in DEFAULT_VERDICTS and "PAUSED" not in DEFAULT_VERDICTS


def test_the_schedules_file_reader_accepts_routes_and_the_deadline() -> None:
    [spec] = load(FILE)
    assert spec.deadline == timedelta(minutes=45)
    with pytest.raises(ScheduleFileError, match=r"unknown top-level key\(s\) alerts"):
        load(FILE.replace("[[alert]]", "[[alerts]]"))


def test_a_file_without_routes_has_none() -> None:
    assert load_routes('[[schedule]]\nname = "a"\nevery = "1m"\njob = "j"\n') == []


def test_each_problem_is_one_line_naming_the_route_and_field() -> None:
    text = """
[[alert]]
name = "a"
kind = "pager"

[[alert]]
name = "b"
kind = "webhook"
url = "https://hooks.example.com/secret"
verdicts = ["LATE", "SLOW"]
repeat = "10s"

[[alert]]
name = "c"
kind = "email"
smtp_host = "mail"
smtp_port = 0
smtp_security = "ssl"
to = ["not an address"]
smtp_password_env = "P"

[[alert]]
name = "a"
kind = "slack"
url_env = "1BAD"
"""
    assert problems(text) == [
        "alert 'a': kind: required; one of webhook | slack | email, got 'pager'",
        "alert 'b': url: unknown field for kind webhook",
        "alert 'b': verdicts: unknown verdict(s) 'SLOW'; one of BROKEN, DEAD, NO-TICKER, TICKER-CRASHING, "
        "NO-WORKER, OVERDUE, BACKLOG, LATE, RETRYING, PAUSED, DISABLED, ENDED",
        "alert 'b': repeat: from 1m to 3660 days, got '10s'",
        "alert 'b': url_env: required; the name of the alert process's environment variable that holds it "
        "(the secret itself stays out of the file)",
        "alert 'c': to: required; a list of addresses such as [\"oncall@example.com\"], got ['not an address']",
        "alert 'c': from: required; an address such as 'fleet@example.com', got None",
        "alert 'c': smtp_security: one of none | starttls | tls, got 'ssl'",
        "alert 'c': smtp_port: a port from 1 to 65535, got 0",
        "alert 'c': smtp_password_env: given without smtp_user",
        "alert 'a': name: declared twice, at [[alert]] #1 and #4",
        "alert 'a': url_env: required; the name of the alert process's environment variable that holds it "
        "(the secret itself stays out of the file), got '1BAD'",
    ]


def test_a_misspelt_field_and_a_name_of_the_wrong_type_are_said_as_they_are() -> None:
    text = """
[[alert]]
name = 7
kind = "slack"
url_env = "SLACK_URL"
reapeat = "1h"

[[alert]]
kind = "webhook"
url_env = "HOOK"
recovry = false
"""
    assert problems(text) == [
        "alert #1: name: must be a string: letters, digits and . _ : @ -, got 7",
        "alert #1: reapeat: unknown field for kind slack (did you mean repeat?)",
        "alert #2: name: required; letters, digits and . _ : @ -",
        "alert #2: recovry: unknown field for kind webhook (did you mean recovery?)",
    ]


def test_routes_and_schedules_are_checked_together(tmp_path: Path) -> None:
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    one.write_text(FILE.replace('deadline = "45m"', 'deadline = "soon"'))
    two.write_text('[[alert]]\nname = "hook"\nkind = "webhook"\nurl_env = "X"\n')
    with pytest.raises(ScheduleFileError) as e:
        gather_all([one, two], [])
    assert e.value.problems == [
        f"{one}: schedule 'nightly': deadline: invalid duration 'soon' (expected e.g. '30s', '5m', '1h30m', '500ms')",
        f"alert 'hook': name: declared twice, in {one} and in {two}",
    ]
    one.write_text(FILE)
    two.write_text("")
    specs, routes = gather_all([one, two], [])
    assert [s.name for s in specs] == ["nightly"] and [r.name for r in routes or []] == [
        "ops-slack",
        "oncall-mail",
        "hook",
    ]
    assert gather_all([], [])[1] is None  # no file: the stored routes stay as they are
