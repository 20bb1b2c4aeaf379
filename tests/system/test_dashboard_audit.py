"""The schedule page's audit rows and a calendar's ENDED verdict, in headless Chromium: who did what
is shown (the latest rows, bounded), as text whatever it holds, and an action taken on the page
adds its own row naming the dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from playwright.sync_api import Page

import fleet
from fleet.ops.dashboard.pages import AUDIT_SHOWN
from fleet.timing.schedfile import load
from tests.support import processes, scalar, wait_for
from tests.system.test_dashboard import XSS, Dialogs, browser, page, shot, start_dashboard

__all__ = ["browser", "page"]  # the fixtures, shared with the dashboard's other tests


def test_the_schedule_page_shows_who_did_what_as_text(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, page: tuple[Page, Dialogs]
) -> None:
    p, dialogs = page
    specs = load(
        '[[schedule]]\nname = "audited"\nevery = "1d"\nstart_at = "2099-01-01T00:00:00Z"\njob = "noop"\n'
        '[[schedule]]\nname = "over"\nevery = "1h"\njob = "noop"\nuntil = "2026-01-01"\n'
    )
    with fleet.Client(db_url, by=XSS) as client:
        client.apply(specs, note=XSS)
        for n in range(AUDIT_SHOWN + 5):
            client.trigger("audited", args={"n": n}, note=f"trigger {n}")
            conn.execute("DELETE FROM fleet.job_runs WHERE origin = 'trigger'")  # a slot per second
    with processes() as procs:
        _, url = start_dashboard(procs, db_url, tmp_path)
        p.goto(url + "schedules/audited")
        rows = p.locator("#audit tr.audit-row")
        assert rows.count() == AUDIT_SHOWN  # the latest ones, no more
        assert "trigger 24" in rows.first.inner_text() and XSS in rows.first.inner_text()
        assert p.locator("script").count() == 1 and p.locator("img").count() == 0  # dashboard.js only

        # an action on the page adds a row naming the dashboard, shown after the redirect
        p.fill("#pause-note", "disk full")
        p.click("#pause")
        p.wait_for_selector("#note")
        first = p.locator("#audit tr.audit-row").first
        assert first.get_attribute("data-action") == "pause"
        assert "dashboard" in first.inner_text() and "disk full" in first.inner_text()
        assert (
            scalar(conn, "SELECT by_name FROM fleet.schedule_audit ORDER BY id DESC LIMIT 1") == "dashboard"
        )
        shot(p, "schedule-audit")

        # the apply's row, with its hostile note, further down the schedule's history
        p.goto(url + "schedules/over")
        assert p.locator("#health").get_attribute("data-verdict") == "ENDED"
        assert p.locator("#calendar").inner_text() == "until 2026-01-01"
        (row,) = p.locator("#audit tr.audit-row").all()
        assert row.get_attribute("data-action") == "apply" and XSS in row.inner_text()
        assert p.locator("script").count() == 1
        wait_for(lambda: p.locator("[data-live]").get_attribute("data-refreshed"), what="a refresh")
        assert XSS in p.locator("#audit").inner_text() and p.locator("script").count() == 1
    assert dialogs.seen == [] and dialogs.console_errors == []
