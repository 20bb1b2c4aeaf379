"""BROKEN, NO-TICKER and TICKER-CRASHING on a real database: in `fleetctl status` (text, JSON, exit
code), `show`, the metrics, and the ticker's loop recording a step's unexpected error."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest

from fleet.health import reading
from fleet.health.results import HEALTH_FIELDS
from fleet.ops.metrics import FleetCollector
from fleet.process.settings import ticker_settings
from fleet.store.queries import q
from fleet.store.registry import process_crash, process_register, process_remove
from fleet.ticker import loop
from fleet.ticker.tick import run_once
from tests.integration.ops_support import Samples, add_run, fleetctl, fleetctl_json, hourly, samples, value
from tests.support import apply_text, live_ticker, scalar

Cap = pytest.CaptureFixture[str]
SLOT = datetime(2026, 3, 1, 10, tzinfo=UTC)
# what the ticker writes, with a control character a terminal must not receive as such
ERROR = "cron: no slot after 2031-03-09T02:30:00+00:00 \x1b[2J"


def scrape(db_url: str) -> Samples:
    return samples(FleetCollector(db_url, settle_s=0).render().decode())


def test_a_broken_schedule_is_broken_with_its_error_and_the_others_keep_their_verdicts(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "broken", "dead", "fine")
    live_ticker(conn)
    add_run(conn, "dead", SLOT, "dead", error="boom")
    add_run(conn, "broken", SLOT, "done")
    conn.execute(q("schedule_break"), {"now": None, "names": ["broken"], "errors": [ERROR]})

    code, out, _ = fleetctl(capsys, db_url, "status")
    assert code == 1
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert out.splitlines()[0].startswith("SCHEDULE")  # no fleet line: a ticker is live
    assert rows["broken"].split()[1] == "BROKEN"
    assert rows["broken"].endswith("cron: no slot after 2031-03-09T02:30:00+00:00 \\x1b[2J")  # escaped
    assert "\x1b" not in out
    assert rows["dead"].split()[1] == "DEAD" and rows["fine"].split()[1] == "OK"

    code, payload = fleetctl_json(capsys, db_url, "status")
    by = {s["name"]: s for s in payload}
    assert code == 1 and isinstance(payload, list)
    assert all(tuple(s) == HEALTH_FIELDS for s in payload)  # every key, broken_error among them
    assert (by["broken"]["verdict"], by["broken"]["healthy"], by["broken"]["broken_error"]) == (
        "BROKEN",
        False,
        ERROR,
    )
    assert by["broken"]["problems"] == ["BROKEN"] and by["broken"]["broken_at"].endswith("Z")
    assert (by["dead"]["verdict"], by["dead"]["broken_error"]) == ("DEAD", None)
    assert (by["fine"]["verdict"], by["fine"]["broken_at"]) == ("OK", None)
    assert fleetctl(capsys, db_url, "status", "fine", "dead")[0] == 1
    assert fleetctl(capsys, db_url, "status", "fine")[0] == 0

    # a slot of the schedule tells why no new slot comes; its JSON stays the client's
    code, out, _ = fleetctl(capsys, db_url, "show", "broken", "2026-03-01T10:00:00Z")
    assert code == 0 and "  schedule BROKEN since " in out and "\\x1b[2J" in out and "\x1b" not in out
    code, shown = fleetctl_json(capsys, db_url, "show", "broken", "2026-03-01T10:00:00Z")
    assert "schedule_broken_error" not in shown

    got = scrape(db_url)
    assert value(got, "fleet_schedule_verdict", schedule="broken", verdict="BROKEN") == 1
    assert value(got, "fleet_schedule_verdict", schedule="broken", verdict="OK") == 0
    assert value(got, "fleet_schedule_verdict", schedule="dead", verdict="DEAD") == 1
    assert value(got, "fleet_schedule_verdict", schedule="fine", verdict="OK") == 1
    assert value(got, "fleet_schedule_healthy", schedule="broken") == 0
    assert value(got, "fleet_schedule_broken", schedule="broken") == 1
    assert value(got, "fleet_schedule_broken", schedule="fine") == 0
    assert value(got, "fleet_schedules", verdict="BROKEN") == 1
    assert value(got, "fleet_schedules_broken") == 1
    assert value(got, "fleet_schedule_broken_info", schedule="broken", error=ERROR) == 1

    # changing the schedule (apply) clears the mark: it is OK again
    apply_text(conn, '[[schedule]]\nname = "broken"\nevery = "2h"\njob = "noop"\noverlap = "allow"\n')
    (h,) = reading.schedule_health(conn, ["broken"])
    assert (h.verdict, h.broken_at, h.broken_error) == ("OK", None, None)


def test_without_a_live_ticker_every_enabled_schedule_is_no_ticker(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    assert fleetctl(capsys, db_url, "status")[:2] == (0, "no schedules\n")  # nothing expects a ticker
    hourly(conn, "a", "b", "quiet")
    conn.execute("UPDATE fleet.schedules SET paused_at = now() WHERE name = 'quiet'")

    # no ticker has ever registered
    code, out, _ = fleetctl(capsys, db_url, "status")
    lines = out.splitlines()
    assert code == 1
    assert (
        lines[0]
        == "fleet: NO-TICKER: no ticker is registered: none has started, or the last one stopped (start fleet-ticker)"
    )
    assert lines[1].startswith("SCHEDULE")
    code, payload = fleetctl_json(capsys, db_url, "status")
    assert code == 1 and {s["name"]: s["verdict"] for s in payload} == {
        "a": "NO-TICKER",
        "b": "NO-TICKER",
        "quiet": "PAUSED",  # it expects no slot
    }
    assert all(not s["healthy"] for s in payload if s["name"] != "quiet")
    assert fleetctl(capsys, db_url, "status", "quiet")[:2] == (
        0,
        fleetctl(capsys, db_url, "status", "quiet")[1],
    )
    assert not fleetctl(capsys, db_url, "status", "quiet")[1].startswith("fleet:")

    # a ticker last seen 75 s ago (killed: its row stays) is no live ticker
    process_register(conn, "ticker-a", "ticker")
    conn.execute("UPDATE fleet.processes SET seen_at = now() - interval '75 seconds'")
    code, out, _ = fleetctl(capsys, db_url, "status")
    first = out.splitlines()[0]
    assert code == 1 and first.startswith("fleet: NO-TICKER: no ticker seen for 1m1")
    assert "(last: ticker-a on " in first
    got = scrape(db_url)
    assert value(got, "fleet_tickers_live") == 0
    assert 75 <= value(got, "fleet_ticker_last_seen_seconds") < 90
    assert value(got, "fleet_schedule_verdict", schedule="a", verdict="NO-TICKER") == 1
    assert value(got, "fleet_schedules", verdict="NO-TICKER") == 2

    # seen 50 s ago: still live, and the schedules are OK
    conn.execute("UPDATE fleet.processes SET seen_at = now() - interval '50 seconds'")
    code, out, _ = fleetctl(capsys, db_url, "status")
    assert code == 0 and out.startswith("SCHEDULE")
    conn.execute("UPDATE fleet.processes SET seen_at = now()")
    code, payload = fleetctl_json(capsys, db_url, "status")
    assert code == 0 and [s["verdict"] for s in payload] == ["OK", "OK", "PAUSED"]
    assert value(scrape(db_url), "fleet_tickers_live") == 1
    # a worker is no ticker
    conn.execute("DELETE FROM fleet.processes")
    conn.execute("INSERT INTO fleet.processes (id, kind, host, pid) VALUES ('w1', 'worker', 'h', 1)")
    assert fleetctl(capsys, db_url, "status")[0] == 1


def test_a_ticker_that_crashed_lately_is_ticker_crashing_and_keeps_its_count_across_restarts(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    hourly(conn, "a")
    process_register(conn, "ticker-a", "ticker")
    assert fleetctl(capsys, db_url, "status")[0] == 0
    process_crash(conn, "ticker-a", "ticker", "RuntimeError: boom\x07")
    code, out, _ = fleetctl(capsys, db_url, "status")
    first = out.splitlines()[0]
    assert code == 1 and first.startswith("fleet: TICKER-CRASHING: ticker-a on ")
    assert "(1 crash(es) in all)" in first and first.endswith(": RuntimeError: boom\\x07")
    code, payload = fleetctl_json(capsys, db_url, "status")
    assert code == 1 and payload[0]["verdict"] == "TICKER-CRASHING"
    got = scrape(db_url)
    assert value(got, "fleet_tickers_crashing") == 1 and value(got, "fleet_ticker_crashes") == 1
    assert value(got, "fleet_tickers_live") == 1

    # restarted under the same id (a process manager's restart): the count stays and grows
    process_register(conn, "ticker-a", "ticker")
    process_crash(conn, "ticker-a", "ticker", "RuntimeError: again")
    row = conn.execute("SELECT crashes, last_error FROM fleet.processes WHERE id = 'ticker-a'").fetchone()
    assert row == {"crashes": 2, "last_error": "RuntimeError: again"}
    assert "(2 crash(es) in all)" in fleetctl(capsys, db_url, "status")[1]

    # a crash older than a few minutes is history: healthy again, the count still exported
    conn.execute("UPDATE fleet.processes SET crashed_at = now() - interval '6 minutes'")
    code, out, _ = fleetctl(capsys, db_url, "status")
    assert code == 0 and out.startswith("SCHEDULE")
    assert value(scrape(db_url), "fleet_ticker_crashes") == 2
    assert value(scrape(db_url), "fleet_tickers_crashing") == 0
    # a clean stop removes the row, its count with it
    process_remove(conn, "ticker-a")
    assert scalar(conn, "SELECT count(*) FROM fleet.processes") == 0


def test_a_step_error_is_logged_recorded_and_the_ticker_goes_on(
    capsys: Cap, db_url: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    apply_text(
        conn, '[[schedule]]\nname = "s"\nevery = "1h"\njob = "noop"\nstart_at = "2099-01-01T00:00:00Z"\n'
    )
    real = run_once
    calls: list[Any] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(
            conn.execute(
                "SELECT crashes, crashed_at, last_error FROM fleet.processes WHERE id = 't-crash'"
            ).fetchone()
        )
        if len(calls) == 1:
            raise ZeroDivisionError("division by zero\nsecond line")
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "run_once", flaky)
    settings = ticker_settings(["--until-idle", "--id", "t-crash"], {"FLEET_DATABASE_URL": db_url})
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(loop.Ticker(settings).run()))
    t.start()
    t.join(30)
    assert not t.is_alive() and result == [0]  # it went on, ticked until idle and stopped cleanly
    assert len(calls) >= 2
    first, second = calls[0], calls[1]
    assert first is not None and first["crashes"] == 0
    assert second is not None and second["crashes"] == 1
    assert second["last_error"] == "ZeroDivisionError: division by zero"
    events = [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    errors = [e for e in events if e["event"] == "tick_error"]
    assert [(e["ticker_id"], e["error"]) for e in errors] == [
        ("t-crash", "ZeroDivisionError: division by zero")
    ]
    # a clean stop removes the row
    assert scalar(conn, "SELECT count(*) FROM fleet.processes") == 0


def test_the_fleet_verdicts_follow_the_instant_of_the_read(conn: psycopg.Connection[Any]) -> None:
    hourly(conn, "a")
    now = scalar(conn, "SELECT now()")
    live_ticker(conn, at=now)
    fleet, (h,) = reading.health_report(conn, now=now + timedelta(seconds=59))
    assert (fleet.live_tickers, h.verdict) == (1, "OK")
    fleet, (h,) = reading.health_report(conn, now=now + timedelta(seconds=61))
    assert (fleet.live_tickers, h.verdict, fleet.last_ticker is not None) == (0, "NO-TICKER", True)
    assert fleet.last_ticker is not None and fleet.last_ticker.id == "ticker-t"


def test_the_dashboard_shows_broken_its_error_the_fleet_alarm_and_the_legend(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    from fleet.ops.dashboard.app import Dashboard, Request
    from fleet.ops.dashboard.config import DashboardSettings
    from fleet.ops.httpd import Credentials
    from fleet.store.pool import make_pool

    hourly(conn, "broken", "fine")
    conn.execute(
        q("schedule_break"), {"now": None, "names": ["broken"], "errors": ["cron: <no slot> after 2031"]}
    )
    settings = DashboardSettings(
        "127.0.0.1", 0, Credentials(), read_only=True, read_only_reason="test", trace_url=""
    )
    pool = make_pool(db_url, "fleet-tests dashboard", min_size=1, max_size=2)
    app = Dashboard(settings, pool)
    headers = {"Host": "127.0.0.1"}
    try:

        def page(path: str) -> str:
            r = app.handle(Request("GET", path, {}, headers))
            assert r.status == 200, r.body
            return r.body.decode()

        overview = page("/")
        assert 'data-name="broken" data-verdict="BROKEN"' in overview
        assert 'data-name="fine" data-verdict="NO-TICKER"' in overview
        assert "cron: &lt;no slot&gt; after 2031" in overview  # the error, as text
        assert 'id="fleet-alarm"' in overview
        assert (
            "fleet: NO-TICKER: no ticker is registered: none has started, or the last one stopped (start fleet-ticker)"
            in overview
        )
        for v in ("BROKEN", "NO-TICKER", "TICKER-CRASHING"):  # each verdict in the legend, in its colour
            assert f'<span class="verdict v-{v.lower()}" title=' in overview
        css = app.handle(Request("GET", "/static/dashboard.css", {}, headers)).body.decode()
        assert all(
            f".v-{v.lower()} {{ background:" in css for v in ("broken", "no-ticker", "ticker-crashing")
        )
        schedule = page("/schedules/broken")
        assert 'id="health" data-verdict="BROKEN"' in schedule and 'id="broken"' in schedule
        assert "cron: &lt;no slot&gt; after 2031" in schedule

        live_ticker(conn)
        app.health.invalidate()
        overview = page("/")
        assert 'id="fleet-alarm"' not in overview and 'data-name="fine" data-verdict="OK"' in overview
    finally:
        app.close()
        pool.close()
