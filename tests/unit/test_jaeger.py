"""The Jaeger UI search that `fleetctl show`, `trace` and the dashboard link to: every attempt of one
slot, found by its span tags."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime, timedelta, timezone

from fleet.ops.jaeger import jaeger_search_url

SLOT = datetime(2026, 11, 2, 1, 0, tzinfo=UTC)


def test_jaeger_search_url_finds_one_slot_by_its_tags() -> None:
    url = jaeger_search_url("http://jaeger.internal:16686/", "nightly-report", SLOT)
    parts = urllib.parse.urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("http", "jaeger.internal:16686", "/search")
    q = dict(urllib.parse.parse_qsl(parts.query))
    assert q["service"] == "fleet-worker"
    assert json.loads(q["tags"]) == {
        "fleet.schedule": "nightly-report",
        "fleet.slot": "2026-11-02T01:00:00Z",
    }
    # A custom time range around the slot (microseconds), not the UI's default of the last hour.
    assert q["lookback"] == "custom"
    assert int(q["start"]) == int((SLOT - timedelta(hours=1)).timestamp() * 1_000_000)
    assert int(q["end"]) == int((SLOT + timedelta(days=7)).timestamp() * 1_000_000)


def test_jaeger_search_url_uses_utc_and_the_given_service() -> None:
    berlin = timezone(timedelta(hours=1))
    url = jaeger_search_url("http://localhost:16686", "a b&c", SLOT.astimezone(berlin), service="jobs")
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert q["service"] == "jobs"
    assert json.loads(q["tags"]) == {"fleet.schedule": "a b&c", "fleet.slot": "2026-11-02T01:00:00Z"}
    assert url.startswith("http://localhost:16686/search?")
