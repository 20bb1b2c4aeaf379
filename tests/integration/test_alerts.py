"""Alerts delivered to real receivers on loopback (an HTTP server, an SMTP server), by the alert
process's rounds run in this process with the database's clock pinned: a problem is told once per
route, again after the route's repeat interval, its end once and quietly; a receiver that is down
gets the notice when it is back; a missed deadline is OVERDUE; a fleet without a ticker is the
fleet's notice, not its schedules' LATE."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from fleet.admin.alert_routes import apply_routes, load_routes
from fleet.alert.evaluate import FLEET
from fleet.alert.loop import Alerter
from fleet.alert.options import AlertSettings
from fleet.health.reading import health_report
from fleet.ops.cli import main as fleetctl
from tests.alert_receivers import SmtpReceiver, WebhookReceiver, receivers
from tests.support import apply_text, live_ticker, scalar, wait_for

SCHEDULE = """
[[schedule]]
name = "minutely"
every = "1m"
job = "noop"
"""


def routes(smtp_port: int, hook: str = "", mail: str = "") -> str:
    return f"""
[[alert]]
name = "hook"
kind = "webhook"
url_env = "HOOK_URL"
verdicts = ["LATE"]
{hook}

[[alert]]
name = "mail"
kind = "email"
smtp_host = "127.0.0.1"
smtp_port = {smtp_port}
smtp_security = "none"
from = "fleet@example.test"
to = ["oncall@example.test"]
verdicts = ["LATE"]
{mail}
"""


class Clock:
    """The instant the alert process's reads and writes see, moved on by the test."""

    def __init__(self, start: datetime) -> None:
        self.at = start

    def __call__(self) -> datetime:
        return self.at

    def advance(self, **kw: float) -> None:
        self.at += timedelta(**kw)


def setup(conn: psycopg.Connection[Any], text: str) -> Clock:
    apply_text(conn, text)
    with conn.transaction():
        apply_routes(conn, load_routes(text), prune=False)
    now: datetime = scalar(conn, "SELECT now()")
    clock = Clock(now + timedelta(minutes=10))  # the new schedule has had no success for 10 minutes
    live_ticker(conn, clock())
    return clock


@pytest.fixture
def alerter(db_url: str) -> Iterator[Callable[..., Alerter]]:
    made: list[Alerter] = []

    def make(clock: Clock, hook_url: str = "http://127.0.0.1:9/none", **kw: Any) -> Alerter:
        settings = AlertSettings(
            database_url=db_url,
            alert_id=f"alert-{len(made)}",
            poll_s=10.0,
            timeout_s=5.0,
            senders=2,
            environ={"HOOK_URL": hook_url},
            **kw,
        )
        a = Alerter(settings, now=clock, rand=lambda: 0.999)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()


def outbox(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT route, subject, verdict, event, status, attempts, last_error FROM fleet.alert_outbox ORDER BY id"
    ).fetchall()


def succeed(conn: psycopg.Connection[Any], at: datetime, schedule: str = "minutely") -> None:
    """A run of the schedule that finished successfully at `at` (and a ticker seen then)."""
    live_ticker(conn, at)
    conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, status, attempts, run_after, finished_at)"
        " VALUES (%s, %s, 'noop', 'done', 1, %s, %s)",
        (schedule, at - timedelta(seconds=5), at - timedelta(seconds=5), at),
    )


def test_late_is_told_once_per_route_and_its_end_once(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    with receivers() as (hook, smtp):
        clock = setup(conn, SCHEDULE + routes(smtp.port))
        a = alerter(clock, hook.url)
        first = a.run_once()
        assert first.evaluated is not None and first.evaluated.opened == 2
        assert (first.sent, first.failed) == (2, 0)
        [posted] = hook.received()
        assert posted["event"] == "alert" and posted["verdict"] == "LATE" and posted["schedule"] == "minutely"
        assert posted["summary"].startswith("LATE: minutely: no success for 10m")
        assert hook.posts[0].headers["Content-Type"] == "application/json"
        [(rcpt, mail)] = smtp.received()
        assert rcpt == ["oncall@example.test"] and mail["From"] == "fleet@example.test"
        assert mail["Subject"].startswith("[fleet] LATE: minutely: no success for 10m")
        assert "verdict:  LATE (alert)" in mail.get_content()

        # Still late, read again and again: nothing more is sent (no repeat interval).
        for _ in range(3):
            clock.advance(seconds=11)
            again = a.run_once()
            assert again.evaluated is not None and (again.evaluated.notices, again.sent) == (0, 0)
        assert len(hook.received()) == 1 and len(smtp.received()) == 1

        # A success ends it: one recovery notice per route, once.
        succeed(conn, clock())
        clock.advance(seconds=11)
        assert a.run_once().sent == 2
        clock.advance(seconds=11)
        assert a.run_once().sent == 0
        recovered = hook.received()[1]
        assert recovered["event"] == "recovery" and recovered["verdict"] == "LATE"
        assert recovered["verdict_now"] == "OK" and recovered["summary"].startswith("RESOLVED LATE: minutely")
        assert smtp.received()[1][1]["Subject"].startswith("[fleet] RESOLVED LATE: minutely")
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_state") == 0
        assert [(r["event"], r["status"], r["attempts"]) for r in outbox(conn)] == [
            ("alert", "sent", 1)
        ] * 2 + [("recovery", "sent", 1)] * 2


def test_a_receiver_that_is_down_gets_the_notice_once_it_is_back(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    hook = WebhookReceiver()  # its port chosen, nothing listening yet
    smtp = SmtpReceiver()
    try:
        clock = setup(conn, SCHEDULE + routes(smtp.port))
        a = alerter(clock, hook.url)
        r = a.run_once()
        assert (r.sent, r.failed) == (0, 2)
        rows = outbox(conn)
        assert {row["status"] for row in rows} == {"pending"} and {row["attempts"] for row in rows} == {1}
        assert all("refused" in row["last_error"].lower() for row in rows), rows
        # Not due yet: the back-off (full jitter, at most 5 s after the first failure) has not passed.
        clock.advance(seconds=1)
        assert a.run_once().failed == 0
        clock.advance(seconds=5)
        assert a.run_once().failed == 2  # still down: tried again, and failed again
        hook.start()
        smtp.start()
        clock.advance(seconds=10)  # past the second back-off (at most 10 s)
        assert a.run_once().sent == 2
        clock.advance(seconds=11)
        assert a.run_once().sent == 0
        assert len(hook.received()) == 1 and len(smtp.received()) == 1
        assert [(row["status"], row["attempts"], row["last_error"]) for row in outbox(conn)] == [
            ("sent", 3, None)
        ] * 2
    finally:
        hook.stop()
        smtp.stop()


def test_a_refusing_receiver_is_retried_too(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    with receivers() as (hook, smtp):
        hook.status = 503
        clock = setup(conn, SCHEDULE + routes(smtp.port))
        a = alerter(clock, hook.url)
        assert a.run_once().failed == 1  # the mail went, the webhook answered 503
        [row] = [r for r in outbox(conn) if r["route"] == "hook"]
        assert row["last_error"] == "HTTP 503: ok" and row["status"] == "pending"
        hook.status = 200
        clock.advance(seconds=6)
        assert a.run_once().sent == 1
        assert len(hook.received()) == 1 and len(smtp.received()) == 1


def test_an_open_problem_is_told_again_after_the_repeat_interval(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    with receivers() as (hook, smtp):
        clock = setup(conn, SCHEDULE + routes(smtp.port, hook='repeat = "1h"'))
        a = alerter(clock, hook.url)
        a.run_once()
        clock.advance(minutes=30)
        live_ticker(conn, clock())
        a.run_once()
        assert [p["event"] for p in hook.received()] == ["alert"]
        clock.advance(minutes=31)
        live_ticker(conn, clock())
        a.run_once()
        posts = hook.received()
        assert [(p["event"], p["notice"]) for p in posts] == [("alert", 1), ("repeat", 2)]
        assert "(still, for 1h01m)" in posts[1]["summary"]
        assert len(smtp.received()) == 1  # the mail route repeats nothing
        assert scalar(conn, "SELECT notices FROM fleet.alert_state WHERE route = 'hook'") == 2


def test_recovery_notices_can_be_turned_off(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    with receivers() as (hook, smtp):
        clock = setup(conn, SCHEDULE + routes(smtp.port, mail="recovery = false"))
        a = alerter(clock, hook.url)
        a.run_once()
        succeed(conn, clock())
        clock.advance(seconds=11)
        a.run_once()
        assert [p["event"] for p in hook.received()] == ["alert", "recovery"]
        assert len(smtp.received()) == 1
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_state") == 0  # closed all the same


def test_a_slack_route_posts_text_with_its_mention_on_alerts_only(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    text = (
        SCHEDULE
        + """
[[alert]]
name = "chat"
kind = "slack"
url_env = "HOOK_URL"
mention = "<!here>"
verdicts = ["LATE"]
"""
    )
    with receivers() as (hook, _):
        clock = setup(conn, text)
        a = alerter(clock, hook.url)
        a.run_once()
        succeed(conn, clock())
        clock.advance(seconds=11)
        a.run_once()
        alert, recovery = hook.received()
        assert alert == {"text": alert["text"]} and alert["text"].startswith(
            "<!here> :rotating_light: LATE: minutely"
        )
        assert recovery["text"].startswith(":white_check_mark: RESOLVED LATE: minutely")


def test_a_missed_deadline_is_overdue_and_told(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    text = """
[[schedule]]
name = "tenly"
every = "10m"
job = "noop"
deadline = "5m"

[[alert]]
name = "hook"
kind = "webhook"
url_env = "HOOK_URL"
verdicts = ["OVERDUE"]
"""
    with receivers() as (hook, _):
        apply_text(conn, text)
        with conn.transaction():
            apply_routes(conn, load_routes(text), prune=False)
        created: datetime = scalar(conn, "SELECT updated_at FROM fleet.schedules")
        clock = Clock(created + timedelta(minutes=31))
        live_ticker(conn, clock())
        _, [h] = health_report(conn, None, clock())
        # the newest slot whose deadline (slot + 5m) has passed is the one at or before now - 5m
        slot = h.overdue_slot
        assert slot is not None and clock() - timedelta(minutes=15) < slot <= clock() - timedelta(minutes=5)
        assert h.verdict == "OVERDUE" and h.deadline_s == 300.0 and "LATE" in h.problems
        a = alerter(clock, hook.url)
        a.run_once()
        [posted] = hook.received()
        assert posted["verdict"] == "OVERDUE" and posted["event"] == "alert"
        assert (
            f"the run of slot {slot.isoformat().replace('+00:00', 'Z')} was not done by its deadline"
            in posted["detail"]
        )
        # that slot's run done: the promise is kept again (LATE alone is not this route's)
        succeed(conn, clock(), "tenly")
        conn.execute(
            "UPDATE fleet.job_runs SET scheduled_for = %s WHERE schedule_name = 'tenly'",
            (slot,),
        )
        _, [h] = health_report(conn, None, clock())
        assert h.overdue_slot is None and "OVERDUE" not in h.problems
        clock.advance(seconds=11)
        a.run_once()
        assert [p["event"] for p in hook.received()] == ["alert", "recovery"]


def test_a_schedule_without_a_deadline_or_paused_is_never_overdue(conn: psycopg.Connection[Any]) -> None:
    apply_text(conn, SCHEDULE)
    now: datetime = scalar(conn, "SELECT now()")
    _, [h] = health_report(conn, None, now + timedelta(hours=1))
    assert h.deadline_s is None and h.overdue_slot is None and "OVERDUE" not in h.problems
    apply_text(conn, SCHEDULE + 'deadline = "1m"\n')
    conn.execute("UPDATE fleet.schedules SET paused_at = now()")
    _, [h] = health_report(conn, None, now + timedelta(hours=1))
    assert h.deadline_s == 60.0 and h.overdue_slot is None and h.verdict == "PAUSED"


def test_status_says_overdue_and_names_the_slot(
    db_url: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    apply_text(conn, '[[schedule]]\nname = "fast"\nevery = "1s"\njob = "noop"\ndeadline = "1s"\n')
    live_ticker(conn)

    def overdue() -> bool:
        _, [h] = health_report(conn)
        return h.verdict == "OVERDUE"

    wait_for(overdue, timeout=20, what="the schedule OVERDUE")
    assert fleetctl(["--database-url", db_url, "status", "fast"]) == 1
    out = capsys.readouterr().out
    assert "OVERDUE" in out and "not done by its deadline" in out, out


def test_apply_stores_routes_changes_them_and_prune_removes_them_with_their_notices(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    with receivers() as (hook, smtp):
        text = SCHEDULE + routes(smtp.port)
        clock = setup(conn, text)
        a = alerter(clock, hook.url)
        a.run_once()
        with conn.transaction():
            same = apply_routes(conn, load_routes(text), prune=True)
        assert (same.created, same.updated, same.unchanged, same.removed) == ([], [], ["hook", "mail"], [])
        changed = text.replace('verdicts = ["LATE"]\n\n', 'verdicts = ["LATE", "DEAD"]\n\n', 1)
        with conn.transaction():
            plan = apply_routes(conn, load_routes(changed), prune=True, plan=True)
            assert plan.updated == ["hook"]
            assert scalar(conn, "SELECT verdicts FROM fleet.alert_routes WHERE name = 'hook'") == ["LATE"]
            r = apply_routes(conn, load_routes(changed), prune=True)
        assert (r.updated, r.unchanged) == (["hook"], ["mail"])
        assert scalar(conn, "SELECT verdicts FROM fleet.alert_routes WHERE name = 'hook'") == ["DEAD", "LATE"]
        # a changed route keeps what it has told: nothing is sent again
        clock.advance(seconds=11)
        assert a.run_once().sent == 0
        only_hook = changed[: changed.index('[[alert]]\nname = "mail"')]
        with conn.transaction():
            r = apply_routes(conn, load_routes(only_hook), prune=True)
        assert r.removed == ["mail"]
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_state WHERE route = 'mail'") == 0
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_outbox WHERE route = 'mail'") == 0
        # the schedule's deadline is a field apply compares like the others
        changed_schedule = apply_text(conn, SCHEDULE + 'deadline = "90s"\n')
        assert changed_schedule.updated == ["minutely"]
        assert [f.field for c in changed_schedule.changes for f in c.fields] == ["deadline"]


def test_no_live_ticker_is_told_once_as_the_fleets_and_its_end_when_one_is_back(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    text = (
        SCHEDULE
        + '[[schedule]]\nname = "other"\nevery = "1h"\njob = "noop"\n'
        + '[[alert]]\nname = "hook"\nkind = "webhook"\nurl_env = "HOOK_URL"\nverdicts = ["NO-TICKER"]\n'
    )
    with receivers() as (hook, _):
        apply_text(conn, text)
        with conn.transaction():
            apply_routes(conn, load_routes(text), prune=False)
        clock = Clock(scalar(conn, "SELECT now()") + timedelta(minutes=2))  # no ticker seen: none ever ran
        a = alerter(clock, hook.url)
        a.run_once()
        [posted] = hook.received()
        assert posted["verdict"] == "NO-TICKER" and posted["schedule"] is None
        assert posted["schedules"] == ["minutely", "other"]
        assert posted["summary"] == "NO-TICKER: fleet: no ticker is running: no slot is created"
        clock.advance(seconds=11)
        live_ticker(conn, clock())
        a.run_once()
        assert [p["event"] for p in hook.received()] == ["alert", "recovery"]
        assert hook.received()[1]["summary"].startswith("RESOLVED NO-TICKER: fleet: ended")


FLEET_OF_FIVE = "".join(f'[[schedule]]\nname = "s{i}"\nevery = "1m"\njob = "noop"\n\n' for i in range(5))
# every unhealthy verdict, said again each minute; and a route that asked for LATE alone
TWO_ROUTES = """
[[alert]]
name = "all"
kind = "webhook"
url_env = "HOOK_URL"
repeat = "1m"

[[alert]]
name = "late"
kind = "webhook"
url_env = "HOOK_URL"
verdicts = ["LATE"]
"""


def told(posts: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Route, schedule (FLEET for the fleet's own), verdict and event of each notice received."""
    return [(p["route"], p["schedule"] or FLEET, p["verdict"], p["event"]) for p in posts]


def test_a_fleet_without_a_ticker_is_one_notice_not_one_per_late_schedule(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    text = FLEET_OF_FIVE + TWO_ROUTES
    with receivers() as (hook, _):
        apply_text(conn, text)
        with conn.transaction():
            apply_routes(conn, load_routes(text), prune=False)
        clock = Clock(scalar(conn, "SELECT now()") + timedelta(minutes=10))
        for i in range(5):
            succeed(conn, clock(), f"s{i}")  # and the ticker seen now, for the last time
        a = alerter(clock, hook.url)
        assert a.run_once().sent == 0

        # The ticker is gone for four minutes, read every 20 s: NO-TICKER after a minute, and every
        # schedule LATE after two (no slot, so no success).
        for _ in range(12):
            clock.advance(seconds=20)
            a.run_once()
        _, healths = health_report(conn, None, clock())
        assert {h.problems for h in healths} == {("NO-TICKER", "LATE")}
        during = told(hook.received())
        assert {(s, v) for _, s, v, _ in during} == {(FLEET, "NO-TICKER")}, during
        # told once per route (`all` again each minute), `late` in place of its schedules' LATE
        repeated = [e for r, _, _, e in during if r == "all"]
        assert repeated == ["alert"] + ["repeat"] * (len(repeated) - 1) and len(repeated) >= 3
        assert [e for r, _, _, e in during if r == "late"] == ["alert"]
        assert hook.received()[0]["schedules"] == [f"s{i}" for i in range(5)]

        # The ticker is back. The schedules are still LATE until their next runs succeed: the
        # fleet's problem ended, not theirs begun.
        clock.advance(seconds=20)
        live_ticker(conn, clock())
        a.run_once()
        back = told(hook.received())[len(during) :]
        assert sorted(back) == [
            ("all", FLEET, "NO-TICKER", "recovery"),
            ("late", FLEET, "NO-TICKER", "recovery"),
        ]
        # four of them succeed; s4 does not, and is LATE two intervals after the ticker's return:
        # its own problem now, told
        for _ in range(6):
            clock.advance(seconds=20)
            for i in range(4):
                succeed(conn, clock(), f"s{i}")
            a.run_once()
        after = told(hook.received())[len(during) + 2 :]
        assert sorted(after) == [("all", "s4", "LATE", "alert"), ("late", "s4", "LATE", "alert")]
        succeed(conn, clock(), "s4")
        clock.advance(seconds=20)
        a.run_once()
        assert sorted(told(hook.received())[len(during) + 4 :]) == [
            ("all", "s4", "LATE", "recovery"),
            ("late", "s4", "LATE", "recovery"),
        ]
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_state") == 0


def test_a_schedule_late_before_the_ticker_left_stays_open_unrepeated_until_it_is_back(
    conn: psycopg.Connection[Any], alerter: Callable[..., Alerter]
) -> None:
    text = SCHEDULE + TWO_ROUTES
    with receivers() as (hook, _):
        clock = setup(conn, text)  # minutely, no success for 10 minutes: LATE
        a = alerter(clock, hook.url)
        a.run_once()
        assert sorted(told(hook.received())) == [
            ("all", "minutely", "LATE", "alert"),
            ("late", "minutely", "LATE", "alert"),
        ]
        # the ticker, last seen now, is gone for three minutes: the fleet's notices only, and no
        # repeat of LATE (nor its end: it has not ended)
        for _ in range(9):
            clock.advance(seconds=20)
            a.run_once()
        during = told(hook.received())[2:]
        assert {(s, v) for _, s, v, _ in during} == {(FLEET, "NO-TICKER")}, during
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_state WHERE subject = 'minutely'") == 2
        # back, and still late: its repeat is due again; its end is told as usual
        clock.advance(seconds=20)
        live_ticker(conn, clock())
        a.run_once()
        back = told(hook.received())[2 + len(during) :]
        assert sorted(back) == [
            ("all", FLEET, "NO-TICKER", "recovery"),
            ("all", "minutely", "LATE", "repeat"),
            ("late", FLEET, "NO-TICKER", "recovery"),
        ]
        succeed(conn, clock())
        clock.advance(seconds=20)
        a.run_once()
        assert sorted(told(hook.received())[2 + len(during) + 3 :]) == [
            ("all", "minutely", "LATE", "recovery"),
            ("late", "minutely", "LATE", "recovery"),
        ]
