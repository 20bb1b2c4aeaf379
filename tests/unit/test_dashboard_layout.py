"""The dashboard's pure parts: its settings (read-only beyond loopback without credentials, bad
flags named) and the timeline's layout (one lane per worker, lost leases, zombies, skipped slots)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fleet.errors import UsageError
from fleet.ops.cli import main
from fleet.ops.dashboard.config import settings_from, trace_link
from fleet.ops.dashboard.timeline import LABEL_W, WIDTH, layout

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def settings(
    listen: str | None = None,
    read_only: bool = False,
    trace_url: str | None = None,
    local_actions: bool = False,
    **env: str,
) -> Any:
    return settings_from(
        listen=listen,
        read_only=read_only,
        trace_url=trace_url,
        refresh_s=3,
        threads=8,
        env=env,
        local_actions=local_actions,
    )


def test_actions_need_credentials_or_local_actions_on_loopback() -> None:
    # every local user reaches a loopback port: without credentials, no actions unless asked for
    local = settings()
    assert local.loopback and local.read_only and "--local-actions" in (local.read_only_reason or "")
    assert not settings(local_actions=True).read_only
    assert not settings("[::1]:8080", local_actions=True).read_only
    assert not settings(FLEET_DASHBOARD_TOKEN="a-long-enough-token").read_only
    wide = settings("0.0.0.0:8787")
    assert wide.read_only and "beyond loopback" in (wide.read_only_reason or "")
    assert not settings("0.0.0.0:8787", FLEET_DASHBOARD_TOKEN="a-long-enough-token").read_only
    assert not settings("10.0.0.5:80", FLEET_DASHBOARD_BASIC_AUTH="ops:pw").read_only
    assert settings(read_only=True, local_actions=True).read_only


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"listen": "8787"}, "--listen: expected HOST:PORT"),
        ({"listen": "host:99999"}, "--listen: expected HOST:PORT"),
        ({"FLEET_DASHBOARD_TOKEN": "short"}, "FLEET_DASHBOARD_TOKEN: at least 16 characters"),
        ({"FLEET_DASHBOARD_BASIC_AUTH": "nopassword"}, "FLEET_DASHBOARD_BASIC_AUTH: expected USER:PASSWORD"),
        ({"trace_url": "ftp://x/{trace_id}"}, "--trace-url: expected an http(s) URL"),
        ({"trace_url": "http://x/trace"}, "--trace-url: expected an http(s) URL holding {trace_id}"),
        ({"trace_url": "http://x/{trace_id}/{other}"}, "--trace-url: only {trace_id} and {span_id}"),
        ({"listen": "0.0.0.0:8787", "local_actions": True}, "--local-actions: only on a loopback address"),
    ],
)
def test_bad_settings_name_their_flag(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        settings(**kwargs)


def test_fleetctl_dashboard_with_a_bad_flag_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", "postgresql://nowhere.invalid/x", "dashboard", "--listen", "8787"]) == 2
    err = capsys.readouterr().err
    assert err == "fleetctl dashboard: --listen: expected HOST:PORT such as 127.0.0.1:8787, got '8787'\n"


def test_trace_links_follow_the_template_and_untraced_attempts_have_none() -> None:
    assert settings().trace_url == "http://localhost:16686/trace/{trace_id}"
    assert (
        settings(FLEET_JAEGER_URL="https://jaeger.example/").trace_url
        == "https://jaeger.example/trace/{trace_id}"
    )
    tempo = settings(trace_url="https://grafana.example/explore?trace={trace_id}&span={span_id}").trace_url
    assert trace_link(tempo, "ab12", "cd34") == "https://grafana.example/explore?trace=ab12&span=cd34"
    assert trace_link(tempo, None, None) is None
    assert trace_link(settings(trace_url="none").trace_url, "ab12", "cd34") is None  # no tracing here


def attempt(
    slot: datetime, n: int, worker: str, start_s: float, end_s: float, outcome: str
) -> dict[str, Any]:
    return {
        "scheduled_for": slot,
        "attempt": n,
        "worker_id": worker,
        "host": "h",
        "started_at": slot + timedelta(seconds=start_s),
        "finished_at": slot + timedelta(seconds=end_s),
        "outcome": outcome,
        "error": None,
    }


def run(slot: datetime, status: str, **kw: Any) -> dict[str, Any]:
    base = {
        "scheduled_for": slot,
        "status": status,
        "attempts": 0,
        "started_at": None,
        "locked_by": None,
        "locked_host": None,
        "last_outcome": None,
        "last_error": None,
    }
    return {**base, **kw}


def test_a_lost_lease_and_its_reclaim_sit_on_their_workers_lanes_in_time_order() -> None:
    slot2 = T0 + timedelta(minutes=1)
    runs = [
        run(slot2, "running", attempts=1, started_at=slot2 + timedelta(seconds=1), locked_by="w3"),
        run(T0, "done", attempts=2),
        run(T0 - timedelta(minutes=1), "skipped", last_error="overlap: an earlier run was still in progress"),
    ]
    attempts = [
        attempt(T0, 1, "w1", 0, 10, "lease_expired"),
        attempt(T0, 2, "w2", 10, 12, "done"),
    ]
    now = slot2 + timedelta(seconds=5)
    t = layout(runs, attempts, {"w1": T0 + timedelta(seconds=5)}, now)
    assert [lane.worker for lane in t.lanes] == ["w1", "w2", "w3"]
    lost, again, running = (lane.bars[0] for lane in t.lanes)
    assert (lost.outcome, again.outcome, running.outcome) == ("lease_expired", "done", "running")
    assert again.x == pytest.approx(lost.x + lost.w) and running.finished_at is None
    assert not lost.zombie  # last seen before its lease was taken over: it died
    assert min(b.x for b in (lost, again, running)) >= LABEL_W and running.x + running.w <= WIDTH
    assert [m.status for m in t.slots] == ["skipped", "done", "running"]
    assert t.slots[0].reason and "overlap" in t.slots[0].reason

    # the same worker seen alive after the reclaim was a zombie: its late writes were fenced
    t = layout(runs, attempts, {"w1": T0 + timedelta(seconds=30)}, now)
    assert t.lanes[0].bars[0].zombie and "fenced" in t.lanes[0].bars[0].label


def test_a_discarded_run_and_an_empty_page() -> None:
    t = layout([run(T0, "skipped", last_outcome="discarded")], [], {}, T0)
    assert [m.status for m in t.slots] == ["discarded"] and t.lanes == []
    assert layout([], [], {}, T0).end > layout([], [], {}, T0).start
