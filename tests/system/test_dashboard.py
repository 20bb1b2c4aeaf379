"""The web dashboard in headless Chromium, over a real database with a live ticker and workers.

Each test starts its processes (a ticker, workers of the test jobs, `fleetctl dashboard` on a free
loopback port) and stops them. Screenshots go to build/dashboard-screenshots/ (the docs page's
images are copied from there).
"""

from __future__ import annotations

import base64
import re
import signal
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, sync_playwright

from fleet.store.db import connect
from tests.support import (
    FAST,
    ROOT,
    Proc,
    apply_text,
    env_for,
    fleetctl_cmd,
    processes,
    scalar,
    start_worker,
    ticker_cmd,
    wait_for,
)

CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "build" / "dashboard-screenshots"
XSS = "<script>alert(1)</script>"
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Debian's chromium (.ci/run installs it): Playwright never downloads a browser of its own here.
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


class Dialogs:
    """Every dialog (alert, confirm) a page opens, and every error on its console (a script or
    style the Content-Security-Policy blocked, a failed request): none may occur."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.console_errors: list[str] = []

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    def __call__(self, dialog: Dialog) -> None:
        self.seen.append(dialog.message)
        dialog.dismiss()


@pytest.fixture
def page(browser: Browser) -> Iterator[tuple[Page, Dialogs]]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    p = context.new_page()
    p.set_default_timeout(TIMEOUT_MS)
    dialogs = Dialogs()
    p.on("dialog", dialogs)
    p.on("console", dialogs.console)
    yield p, dialogs
    context.close()


def start_dashboard(procs: list[Proc], db_url: str, tmp: Path, *flags: str, **env: str) -> tuple[Proc, str]:
    """`fleetctl dashboard` on a free loopback port (unless `flags` say otherwise), acting without
    credentials there (unless `flags` or `env` say otherwise); its address."""
    listen = [] if "--listen" in flags else ["--listen", "127.0.0.1:0"]
    if "--listen" not in flags and "--read-only" not in flags and not env:
        listen.append("--local-actions")
    p = Proc(
        fleetctl_cmd("dashboard", *listen, "--refresh", "0.5", *flags),
        env_for(db_url, **env),
        tmp / f"dashboard-{len(procs)}.log",
    )
    procs.append(p)
    found = wait_for(
        lambda: re.search(r"serving (http://\S+/)", p.output()) or p.popen.poll() is not None,
        what="the dashboard to listen",
    )
    assert isinstance(found, re.Match), p.output()
    return p, found.group(1)


def start_fleet(procs: list[Proc], db_url: str, tmp: Path, *workers: str) -> None:
    procs.append(Proc(ticker_cmd("--poll", "0.5"), env_for(db_url), tmp / "ticker.log"))
    for w in workers:
        start_worker(procs, db_url, tmp, w, *FAST)


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"dashboard-{name}.png"), full_page=True)


def due_run(conn: psycopg.Connection[Any], name: str) -> datetime:
    """A run of `name` due now, at this second's slot (its own schedule lies in the future)."""
    row = conn.execute(
        "INSERT INTO fleet.job_runs (schedule_name, scheduled_for, job, args, overlap, run_after) "
        "SELECT name, date_trunc('second', now()), job, args, overlap, now() FROM fleet.schedules "
        "WHERE name = %s RETURNING scheduled_for",
        (name,),
    ).fetchone()
    assert row is not None
    conn.execute("NOTIFY fleet_runs")
    slot: datetime = row["scheduled_for"]
    return slot


def run_status(conn: psycopg.Connection[Any], name: str, slot: datetime) -> str:
    return str(
        scalar(
            conn,
            "SELECT status::text FROM fleet.job_runs WHERE schedule_name = %s AND scheduled_for = %s",
            (name, slot),
        )
    )


SCHEDULES = """
[[schedule]]
name = "nightly-report"
every = "1d"
start_at = "2099-01-01T00:00:00Z"
job = "permanent_once"
args = { error = "the report's source table is missing" }

[[schedule]]
name = "heartbeat"
every = "2s"
job = "noop"

[[schedule]]
name = "ingest-orders"
every = "1d"
start_at = "2099-01-01T00:00:00Z"
job = "sleep"
args = { seconds = 2 }
"""


# -- an unhealthy schedule, retried from its page --------------------------------------------------


def test_dead_schedule_is_retried_from_its_page_and_the_page_follows(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, page: tuple[Page, Dialogs]
) -> None:
    p, dialogs = page
    apply_text(conn, SCHEDULES)
    conn.execute(
        "UPDATE fleet.schedules SET paused_at = now(), pause_note = 'waits for the new API key' "
        "WHERE name = 'ingest-orders'"
    )
    slot = due_run(conn, "nightly-report")
    with processes() as procs:
        start_fleet(procs, db_url, tmp_path)  # the ticker; the workers come once the page is up
        _, url = start_dashboard(procs, db_url, tmp_path)
        response = p.goto(url)
        assert response is not None and "script-src 'self';" in response.headers["content-security-policy"]
        row = p.locator('tr.schedule[data-name="nightly-report"]')
        assert row.get_attribute("data-verdict") == "NO-WORKER"  # its run waits for a worker
        p.evaluate("window.notReloaded = true")
        for wid in ("w1", "w2"):
            start_worker(procs, db_url, tmp_path, wid, *FAST)
        # the run dies, and the page, not reloaded, turns the schedule DEAD
        p.wait_for_selector('tr.schedule[data-name="nightly-report"][data-verdict="DEAD"]')
        assert p.evaluate("window.notReloaded") is True
        assert row.locator(".dead-count").inner_text() == "1"
        assert "DEAD" in row.locator(".verdict").inner_text()
        wait_for(
            lambda: p.locator('tr.schedule[data-name="heartbeat"] .strip .s-done').count() >= 3,
            what="the heartbeat's done slots in its strip",
        )
        paused = p.locator('tr.schedule[data-name="ingest-orders"][data-verdict="PAUSED"] .note')
        assert paused.inner_text() == "waits for the new API key"
        shot(p, "overview")

        # filters: by verdict, and by a part of the name
        p.select_option("#filter-verdict", "DEAD")
        p.wait_for_url(re.compile(r"verdict=DEAD"))
        assert p.locator("tr.schedule").count() == 1
        p.goto(url + "?name=beat")
        assert [r.get_attribute("data-name") for r in p.locator("tr.schedule").all()] == ["heartbeat"]

        p.goto(url)
        p.click('tr.schedule[data-name="nightly-report"] .name a')
        p.wait_for_selector("#health[data-verdict=DEAD]")
        dead = p.locator("tr.dead-run")
        assert dead.count() == 1 and "the report's source table is missing" in dead.inner_text()

        # Retry while no worker can take the run: it is pending, and the page says so
        workers = procs[2:4]
        for w in workers:
            w.signal(signal.SIGSTOP)
        dead.locator("button.retry").click()
        p.wait_for_selector("#flash")
        assert p.locator("#flash").inner_text().startswith("retry: retried")
        assert run_status(conn, "nightly-report", slot) == "pending"
        assert (
            p.locator(f'tr.run[data-slot="{slot:%Y-%m-%d %H:%M:%S}Z"]').get_attribute("data-status")
            == "pending"
        )
        p.evaluate("window.notReloaded = true")
        for w in workers:
            w.signal(signal.SIGCONT)
        # a worker finishes it, and the same page (not reloaded) shows it done and the schedule OK
        p.wait_for_selector(f'tr.run[data-slot="{slot:%Y-%m-%d %H:%M:%S}Z"][data-status="done"]')
        p.wait_for_selector("#health[data-verdict=OK]")
        assert p.evaluate("window.notReloaded") is True
        assert run_status(conn, "nightly-report", slot) == "done"
        assert scalar(conn, "SELECT attempts FROM fleet.job_runs WHERE schedule_name = 'nightly-report'") == 2
        shot(p, "schedule-retried")

        # the heartbeat's page: its coverage strip (the slot ledger) and its plots, drawn
        p.goto(url + "schedules/heartbeat")
        p.wait_for_selector('#coverage rect[data-outcome="once"]')
        box = p.locator("#coverage").bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 10
        assert p.locator("#coverage rect").count() == 120
        assert p.locator("#lag-plot circle.point").count() >= 3
        assert p.locator("#duration-plot circle.point").count() >= 3
        shot(p, "schedule-coverage")

        p.goto(url + "workers")
        for wid in ("w1", "w2"):
            p.wait_for_selector(f'tr.process[data-id="{wid}"][data-kind="worker"]')
        assert p.locator('tr.process[data-kind="ticker"]').count() == 1
        shot(p, "workers")
    assert dialogs.seen == [] and dialogs.console_errors == []


# -- a worker killed mid-run ----------------------------------------------------------------------


def test_a_killed_workers_lost_lease_and_the_reclaim_show_on_the_timeline(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, page: tuple[Page, Dialogs]
) -> None:
    p, dialogs = page
    apply_text(conn, SCHEDULES)
    with processes() as procs:
        start_fleet(procs, db_url, tmp_path, "w1", "w2")
        workers = dict(zip(("w1", "w2"), procs[1:3], strict=True))
        slot = due_run(conn, "ingest-orders")
        holder = wait_for(
            lambda: scalar(
                conn,
                "SELECT max(locked_by) FROM fleet.job_runs "
                "WHERE schedule_name = 'ingest-orders' AND status = 'running'",
            ),
            what="a worker to claim the run",
        )
        workers[holder].signal(signal.SIGKILL)
        other = "w2" if holder == "w1" else "w1"
        wait_for(
            lambda: run_status(conn, "ingest-orders", slot) == "done", what="the reclaimed run to finish"
        )

        _, url = start_dashboard(procs, db_url, tmp_path)
        p.goto(url + "schedules/ingest-orders")
        key = f"{slot:%Y-%m-%d %H:%M:%S}Z"
        lost = p.locator(f'g.lane[data-worker="{holder}"] rect.bar[data-slot="{key}"]')
        again = p.locator(f'g.lane[data-worker="{other}"] rect.bar[data-slot="{key}"]')
        assert (
            lost.get_attribute("data-outcome") == "lease_expired"
            and lost.get_attribute("data-attempt") == "1"
        )
        assert again.get_attribute("data-outcome") == "done" and again.get_attribute("data-attempt") == "2"
        # the reclaiming attempt starts where the lost one ends (when its lease ran out), to its right
        lost_end = float(lost.get_attribute("x") or 0) + float(lost.get_attribute("width") or 0)
        assert float(again.get_attribute("x") or 0) >= lost_end - 0.5
        assert lost.get_attribute("data-zombie") is None  # killed: it wrote nothing after
        assert p.locator(f'g.lane[data-worker="{holder}"] text.mark').text_content() == "lost"
        shot(p, "timeline")

        p.click(f'g.lane[data-worker="{other}"] a:has(rect.bar[data-slot="{key}"])')
        p.wait_for_selector("tr.attempt[data-attempt='2']")
        rows = p.locator("tr.attempt")
        assert [(r.get_attribute("data-outcome"), r.get_attribute("data-worker")) for r in rows.all()] == [
            ("lease_expired", holder),
            ("done", other),
        ]
        # these workers export no spans: their attempts have trace ids but no trace to link to
        # (tests/integration/test_dashboard_server.py links the traced ones)
        assert scalar(conn, "SELECT bool_or(traced) FROM fleet.job_attempts") is False
        assert rows.locator("a.trace").count() == 0
        assert rows.locator(".no-trace").all_inner_texts() == ["not traced", "not traced"]
        shot(p, "slot")
    assert dialogs.seen == [] and dialogs.console_errors == []


def test_the_wait_before_a_reclaiming_attempt_counts_the_lease_running_out(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Workers with a 2 s lease (FAST); the one holding the run is killed after a heartbeat renewed it.
    apply_text(conn, SCHEDULES)
    with processes() as procs:
        workers = {w: start_worker(procs, db_url, tmp_path, w, *FAST) for w in ("w1", "w2")}
        slot = due_run(conn, "ingest-orders")
        where = "WHERE schedule_name = 'ingest-orders' AND scheduled_for = %s"
        holder = wait_for(
            lambda: scalar(
                conn, f"SELECT max(locked_by) FROM fleet.job_runs {where} AND status = 'running'", (slot,)
            ),
            what="a worker to claim the run",
        )
        wait_for(
            lambda: scalar(conn, f"SELECT renewed_at > started_at FROM fleet.job_runs {where}", (slot,)),
            what="a heartbeat to renew the lease",
        )
        workers[holder].signal(signal.SIGKILL)
        killed = scalar(conn, "SELECT now()")
        wait_for(
            lambda: run_status(conn, "ingest-orders", slot) == "done", what="the reclaimed run to finish"
        )
        _, url = start_dashboard(procs, db_url, tmp_path, "--read-only")
        code, html = get(url + f"schedules/ingest-orders/slots/{slot:%Y-%m-%dT%H:%M:%SZ}")
    assert code == 200, html[:500]
    rows = re.findall(
        r'<tr class="attempt" data-attempt="(\d)" data-outcome="(\w+)"[^>]* data-waited-s="([^"]*)"', html
    )
    assert [(n, outcome) for n, outcome, _ in rows] == [("1", "lease_expired"), ("2", "done")], rows
    assert rows[0][2] == ""  # nothing before the first attempt
    waited = float(rows[1][2])
    lost = conn.execute(
        "SELECT a.renewed_at, a.started_at, a.finished_at, r.started_at AS reclaimed_at FROM fleet.job_attempts a "
        "JOIN fleet.job_runs r USING (schedule_name, scheduled_for) WHERE a.attempt = 1"
    ).fetchone()
    assert lost is not None
    # Its worker was last heard from at the lease's last renewal, before the kill; the lost attempt is
    # recorded as ending at the reclaim, and the wait runs from that renewal to the reclaim.
    assert lost["started_at"] < lost["renewed_at"] <= killed
    assert lost["finished_at"] == lost["reclaimed_at"]
    assert waited == pytest.approx((lost["reclaimed_at"] - lost["renewed_at"]).total_seconds(), abs=1e-3)
    # A run is reclaimed once its lease (2 s from that renewal) has run out: at least the lease, and
    # at most a heartbeat period, a poll interval and the machine's slack more.
    assert 2.0 <= waited < 2.0 + 0.5 + 0.5 + 3.0, waited


# -- text is text ---------------------------------------------------------------------------------


def test_error_text_args_and_a_pause_note_render_as_text_and_no_script_runs(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, page: tuple[Page, Dialogs]
) -> None:
    p, dialogs = page
    apply_text(
        conn,
        '[[schedule]]\nname = "hostile"\nevery = "1d"\nstart_at = "2099-01-01T00:00:00Z"\n'
        f'job = "permanent_once"\nargs = {{ error = "{XSS}", note = "{XSS}" }}\n',
    )
    slot = due_run(conn, "hostile")
    with processes() as procs:
        start_fleet(procs, db_url, tmp_path, "w1")
        wait_for(lambda: run_status(conn, "hostile", slot) == "dead", what="the run to die")
        _, url = start_dashboard(procs, db_url, tmp_path)
        p.goto(url + "schedules/hostile")
        # a pause note and trigger args typed into the page's forms
        p.fill("#pause-note", XSS)
        p.click("#pause")
        p.wait_for_selector("#note")
        p.fill("#trigger-args", '{"x": "' + XSS + '"}')
        p.click("#trigger")
        p.wait_for_selector("#flash")
        assert p.locator("#flash").inner_text().startswith("trigger: triggered")
        assert scalar(conn, "SELECT pause_note FROM fleet.schedules") == XSS
        triggered = scalar(conn, "SELECT args FROM fleet.job_runs WHERE origin = 'trigger'")
        assert triggered == {"x": XSS}

        def shows_as_text(where: str) -> None:
            assert p.locator("script").count() == 1  # dashboard.js, nothing else
            assert p.locator("img").count() == 0
            assert XSS in p.locator(where).inner_text(), where

        p.reload()
        shows_as_text("#note")
        shows_as_text("#schedule-args")
        shows_as_text("#dead")  # the error text
        shows_as_text("#runs")  # the triggered run's args, the error
        shot(p, "hostile-text")
        p.goto(url + "schedules/hostile/slots/" + f"{slot:%Y-%m-%dT%H:%M:%S}Z")
        shows_as_text("#run-args")
        shows_as_text("#last-error")
        shows_as_text("#attempts")
        p.goto(url)
        shows_as_text('tr.schedule[data-name="hostile"] .note')
        # a refresh of the live part puts the same text in again, as text
        wait_for(lambda: p.locator("[data-live]").get_attribute("data-refreshed"), what="a refresh")
        shows_as_text('tr.schedule[data-name="hostile"] .note')

        assert dialogs.console_errors == []
        # bad trigger args: one line naming the field, nothing created (the 400 is on the console)
        p.goto(url + "schedules/hostile")
        p.fill("#trigger-args", "[1, 2]")
        p.click("#trigger")
        assert p.locator("#error").inner_text() == 'args: must be a JSON object, such as {"format": "pdf"}'
        assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE origin = 'trigger'") == 1

    with connect(db_url, "test") as c:
        status = c.execute("SELECT pause_note FROM fleet.schedules").fetchone()
    assert status is not None and status["pause_note"] == XSS
    assert dialogs.seen == []


# -- refusals -------------------------------------------------------------------------------------


def post(url: str, form: dict[str, str], origin: str | None, auth: str | None = None) -> int:
    """POST a form the way a page of `origin` would; the status code (redirects are not followed)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    req = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    if origin:
        req.add_header("Origin", origin)
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def get(url: str, auth: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF token in the page"
    return m.group(1)


def test_read_only_and_posts_without_token_or_credentials_are_refused_and_change_nothing(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, page: tuple[Page, Dialogs]
) -> None:
    p, dialogs = page
    apply_text(conn, SCHEDULES)
    slot = due_run(conn, "nightly-report")
    with processes() as procs:
        start_fleet(procs, db_url, tmp_path, "w1")
        wait_for(lambda: run_status(conn, "nightly-report", slot) == "dead", what="the run to die")
        for w in procs[1:]:
            w.signal(signal.SIGSTOP)  # no worker takes a run these requests might make pending
        slot_form = {"slot": slot.isoformat()}

        # read-only: no actions offered, every POST refused
        _, ro = start_dashboard(procs, db_url, tmp_path, "--read-only")
        origin = ro.rstrip("/")
        p.goto(ro + "schedules/nightly-report")
        assert p.locator("header .readonly").inner_text() == "read-only"
        assert p.locator("form").count() == 0 and p.locator("button").count() == 0
        shot(p, "read-only")
        for action, form in (("retry", slot_form), ("discard", slot_form), ("trigger", {}), ("pause", {})):
            assert post(f"{ro}schedules/nightly-report/{action}", {**form, "csrf": "x"}, origin) == 403

        # on loopback without credentials nor --local-actions: read-only too, since every local user
        # could fetch a page's token and act
        _, local = start_dashboard(procs, db_url, tmp_path, "--listen", "127.0.0.1:0")
        code, html = get(local + "schedules/nightly-report")
        assert code == 200 and 'class="readonly"' in html and "<button" not in html
        assert 'name="csrf"' not in html
        assert post(local + "schedules/nightly-report/retry", slot_form, local.rstrip("/")) == 403

        # beyond loopback without credentials: read-only as well
        _, wide = start_dashboard(procs, db_url, tmp_path, "--listen", "0.0.0.0:0")
        port = urllib.parse.urlsplit(wide).port
        wide_url = f"http://127.0.0.1:{port}/"
        code, html = get(wide_url + "schedules/nightly-report")
        assert code == 200 and 'class="readonly"' in html and "<button" not in html
        assert post(wide_url + "schedules/nightly-report/retry", slot_form, wide_url.rstrip("/")) == 403

        # with credentials: every request needs them, and a POST needs the token and the origin too
        _, rw = start_dashboard(procs, db_url, tmp_path, FLEET_DASHBOARD_BASIC_AUTH="ops:correct horse")
        auth = "Basic " + base64.b64encode(b"ops:correct horse").decode()
        wrong = "Basic " + base64.b64encode(b"ops:wrong horse").decode()
        origin = rw.rstrip("/")
        assert get(rw)[0] == 401 and get(rw, wrong)[0] == 401
        code, html = get(rw + "schedules/nightly-report", auth)
        assert code == 200
        token = csrf_of(html)
        retry = rw + "schedules/nightly-report/retry"
        assert post(retry, slot_form, origin, auth) == 403  # no token
        forged = token[:-1] + ("B" if token.endswith("A") else "A")
        assert post(retry, {**slot_form, "csrf": forged}, origin, auth) == 403  # a wrong token
        assert post(retry, {**slot_form, "csrf": token}, None, auth) == 403  # no Origin
        assert post(retry, {**slot_form, "csrf": token}, "http://evil.example", auth) == 403
        assert post(retry, {**slot_form, "csrf": token}, origin) == 401  # no credentials
        assert post(retry, {**slot_form, "csrf": token}, origin, wrong) == 401
        pause = rw + "schedules/nightly-report/pause"
        assert post(pause, {"csrf": token, "note": "x"}, origin, None) == 401
        # nothing changed
        assert run_status(conn, "nightly-report", slot) == "dead"
        assert scalar(conn, "SELECT paused_at FROM fleet.schedules WHERE name = 'nightly-report'") is None
        assert scalar(conn, "SELECT count(*) FROM fleet.job_runs WHERE schedule_name = 'nightly-report'") == 1
        # the same request with everything in place goes through
        assert post(retry, {**slot_form, "csrf": token}, origin, auth) == 303
        assert run_status(conn, "nightly-report", slot) == "pending"

        # another dashboard process has another token: a token is no good elsewhere
        _, other = start_dashboard(procs, db_url, tmp_path)
        assert post(other + "schedules/nightly-report/pause", {"csrf": token}, other.rstrip("/")) == 403
        assert scalar(conn, "SELECT paused_at FROM fleet.schedules WHERE name = 'nightly-report'") is None
    assert dialogs.seen == [] and dialogs.console_errors == []
