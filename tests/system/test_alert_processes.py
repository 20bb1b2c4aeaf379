"""Two real `fleetctl alert` processes against a real HTTP receiver and a real SMTP server: every
notice is delivered exactly once, after retries while the receiver is down; routes come from the
file `fleetctl apply` was given; the fleet_alert role does its work and nothing more. A ticker is
seen throughout, so that the schedules' LATE is their own (without one it is the fleet's NO-TICKER)."""

from __future__ import annotations

import hashlib
import hmac
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleet.ops.cli import main as fleetctl
from fleet.store.db import connect
from fleet.store.registry import process_register, process_touch
from tests.alert_receivers import SmtpReceiver, WebhookReceiver
from tests.support import Proc, env_for, fleetctl_cmd, log_events, login_roles, processes, scalar, wait_for

SCHEDULES = 12


@contextmanager
def ticker_seen(db_url: str) -> Iterator[None]:
    """A ticker in the registry, seen every second until the block ends (it creates no slot)."""
    stop = threading.Event()
    with connect(db_url, "fleet-tests ticker") as c:
        process_register(c, "ticker-t", "ticker")

        def beats() -> None:
            while not stop.wait(1.0):
                process_touch(c, "ticker-t")

        beat = threading.Thread(target=beats)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()


def schedules_file(tmp: Path, smtp_port: int) -> Path:
    text = "".join(
        f'[[schedule]]\nname = "s{i:02d}"\nevery = "1s"\njob = "noop"\n\n' for i in range(SCHEDULES)
    )
    text += f"""
[[alert]]
name = "hook"
kind = "webhook"
url_env = "FLEET_ALERT_HOOK_URL"
secret_env = "FLEET_ALERT_HOOK_SECRET"
verdicts = ["LATE"]

[[alert]]
name = "mail"
kind = "email"
schedules = ["s00"]
verdicts = ["LATE"]
smtp_host = "127.0.0.1"
smtp_port = {smtp_port}
smtp_security = "none"
from = "fleet@example.test"
to = ["oncall@example.test"]
"""
    path = tmp / "schedules.toml"
    path.write_text(text)
    return path


def test_two_alert_processes_deliver_each_notice_once_after_the_receiver_comes_back(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook, smtp = WebhookReceiver(), SmtpReceiver()
    hook.delay_s = 0.05  # slow enough for both processes to be sending at once
    smtp.start()
    try:
        assert fleetctl(["--database-url", db_url, "apply", str(schedules_file(tmp_path, smtp.port))]) == 0
        assert (
            "alert routes: created hook, mail; created 2, updated 0, unchanged 0, removed 0"
            in capsys.readouterr().out
        )
        env = env_for(db_url, FLEET_ALERT_HOOK_URL=hook.url, FLEET_ALERT_HOOK_SECRET="s3cret")
        with ticker_seen(db_url), processes() as procs:
            for i in range(2):
                argv = fleetctl_cmd("alert", "--id", f"a{i}", "--poll", "0.5", "--senders", "2")
                procs.append(Proc(argv, env, tmp_path / f"alert{i}.log"))
            # the receiver is down: every webhook notice fails, and waits to be tried again
            wait_for(
                lambda: (
                    scalar(
                        conn,
                        "SELECT count(*) FROM fleet.alert_outbox WHERE route = 'hook' AND last_error IS NOT NULL",
                    )
                    == SCHEDULES
                ),
                timeout=60,
                what="every webhook notice failed once while the receiver is down",
            )
            hook.start()
            wait_for(lambda: len(hook.received()) >= SCHEDULES, timeout=60, what="the LATE notices delivered")
            # the schedules are paused: LATE ends for each, told once
            conn.execute("UPDATE fleet.schedules SET paused_at = now(), updated_at = now()")
            wait_for(
                lambda: len(hook.received()) >= 2 * SCHEDULES and len(smtp.received()) >= 2,
                timeout=60,
                what="the recovery notices delivered",
            )
            wait_for(
                lambda: scalar(conn, "SELECT count(*) FROM fleet.alert_outbox WHERE status <> 'sent'") == 0,
                timeout=30,
                what="every notice recorded as sent",
            )
            for p in procs:
                p.signal(signal.SIGTERM)
            assert [p.wait(30) for p in procs] == [0, 0], [p.output() for p in procs]
            sent = [e for p in procs for e in log_events(p) if e["event"] == "alert_sent"]
            by_process = Counter(who for who, _ in _senders(procs))
        posts = hook.received()
        told = Counter((p["schedule"], p["event"]) for p in posts)
        expected = {(f"s{i:02d}", event) for i in range(SCHEDULES) for event in ("alert", "recovery")}
        assert set(told) == expected and set(told.values()) == {1}, told
        assert all(p["verdict"] == "LATE" for p in posts)
        assert [p["verdict_now"] for p in posts if p["event"] == "recovery"] == ["PAUSED"] * SCHEDULES
        # each POST is signed with the route's secret
        for raw in hook.posts:
            digest = hmac.new(b"s3cret", raw.body, hashlib.sha256).hexdigest()
            assert raw.headers["X-Fleet-Signature"] == f"sha256={digest}"
        mails = [m["Subject"] for _, m in smtp.received()]
        assert (
            len(mails) == 2 and mails[0].startswith("[fleet] LATE: s00") and "RESOLVED LATE: s00" in mails[1]
        )
        rows = conn.execute(
            "SELECT event, attempts FROM fleet.alert_outbox WHERE route = 'hook' ORDER BY id"
        ).fetchall()
        assert [r["event"] for r in rows] == ["alert"] * SCHEDULES + ["recovery"] * SCHEDULES
        assert min(r["attempts"] for r in rows[:SCHEDULES]) >= 2  # the alerts were retried
        assert len(sent) == 2 * SCHEDULES + 2  # every delivery, by one process or the other
        assert sum(by_process.values()) == len(sent)
        print(f"notices sent per alert process: {dict(by_process)}")
    finally:
        hook.stop()
        smtp.stop()


def _senders(procs: list[Proc]) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, p in enumerate(procs):
        for e in log_events(p):
            if e["event"] == "alert_sent":
                yield f"a{i}", e


def test_a_test_notice_says_whether_the_route_reaches_its_receiver(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = WebhookReceiver()
    smtp = SmtpReceiver()
    path = schedules_file(tmp_path, smtp.port)
    assert fleetctl(["--database-url", db_url, "apply", str(path)]) == 0
    capsys.readouterr()
    env = env_for(db_url, FLEET_ALERT_HOOK_URL=hook.url, FLEET_ALERT_HOOK_SECRET="x")
    with processes() as procs:
        procs.append(Proc(fleetctl_cmd("alert", "--test", "hook"), env, tmp_path / "down.log"))
        assert procs[-1].wait(30) == 1
        assert (
            "fleetctl alert: route hook: not delivered: URLError: [Errno 111] Connection refused"
            in procs[-1].output()
        )
        hook.start()
        try:
            procs.append(Proc(fleetctl_cmd("alert", "--test", "hook"), env, tmp_path / "up.log"))
            assert procs[-1].wait(30) == 0, procs[-1].output()
            [posted] = hook.received()
            assert posted["verdict"] == "TEST" and posted["test"] is True
        finally:
            hook.stop()
        procs.append(Proc(fleetctl_cmd("alert", "--test", "nope"), env, tmp_path / "nope.log"))
        assert procs[-1].wait(30) == 2
        assert "fleetctl alert: --test: no route 'nope' (routes: hook, mail)" in procs[-1].output()


@pytest.fixture
def role_urls(db_url: str, server_url: str) -> Iterator[dict[str, str]]:
    """A login role granted fleet_alert only, and one granted fleet_operator only, and their URLs."""
    assert fleetctl(["--database-url", db_url, "migrate", "--roles"]) == 0
    with login_roles(server_url, db_url, ("alert", "operator"), "t") as urls:
        yield urls


def test_the_alert_role_reads_health_and_sends_and_changes_nothing_else(
    role_urls: dict[str, str], db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hook, smtp = WebhookReceiver(), SmtpReceiver()
    hook.start()
    smtp.start()
    try:
        path = schedules_file(tmp_path, smtp.port)
        assert fleetctl(["--database-url", role_urls["operator"], "apply", str(path)]) == 0
        wait_for(
            lambda: (
                scalar(
                    conn, "SELECT count(*) FROM fleet.schedules WHERE now() - updated_at > interval '2.5 s'"
                )
                == SCHEDULES
            ),
            timeout=30,
            what="the schedules LATE",
        )
        env = env_for(role_urls["alert"], FLEET_ALERT_HOOK_URL=hook.url, FLEET_ALERT_HOOK_SECRET="x")
        with ticker_seen(db_url), processes() as procs:
            procs.append(Proc(fleetctl_cmd("alert", "--once"), env, tmp_path / "once.log"))
            assert procs[0].wait(60) == 0, procs[0].output()
        assert len(hook.received()) == SCHEDULES and len(smtp.received()) == 1
        with connect(role_urls["alert"], "fleet-tests denied") as c:
            for sql in (
                "UPDATE fleet.schedules SET job = 'x'",
                "UPDATE fleet.alert_routes SET kind = 'slack'",
                "DELETE FROM fleet.job_runs",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute(sql)
        # the operator removes a route: its state and notices go with it
        path.write_text(path.read_text().split('[[alert]]\nname = "mail"')[0])
        assert fleetctl(["--database-url", role_urls["operator"], "apply", "--prune", str(path)]) == 0
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_outbox WHERE route = 'mail'") == 0
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_state WHERE route = 'mail'") == 0
        assert scalar(conn, "SELECT count(*) FROM fleet.alert_state WHERE route = 'hook'") == SCHEDULES
    finally:
        hook.stop()
        smtp.stop()
