"""Finding a slot in the Jaeger UI: the search for every attempt of one slot, by its span tags."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime, timedelta

DEFAULT_JAEGER_URL = "http://localhost:16686"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def jaeger_search_url(base_url: str, schedule: str, slot: datetime, *, service: str = "fleet-worker") -> str:
    """A Jaeger UI search for every attempt of one slot (tags `fleet.schedule` and `fleet.slot`).

    The time range runs from an hour before the slot to a week after it, so attempts of an old slot
    are found too (the UI's default is the last hour).
    """
    if slot.tzinfo is None:
        slot = slot.replace(tzinfo=UTC)
    # `fleet.slot` as the worker writes it (fleet.jobs.slot_iso): UTC ISO-8601 with a Z
    slot_tag = slot.astimezone(UTC).isoformat().replace("+00:00", "Z")
    tags = json.dumps({"fleet.schedule": schedule, "fleet.slot": slot_tag}, separators=(",", ":"))
    query = urllib.parse.urlencode(
        {
            "service": service,
            "tags": tags,
            "lookback": "custom",
            "start": _unix_us(slot - timedelta(hours=1)),
            "end": _unix_us(slot + timedelta(days=7)),
            "limit": 100,
        }
    )
    return f"{base_url.rstrip('/')}/search?{query}"


def _unix_us(t: datetime) -> int:
    """`t` as the UI's microseconds since the Unix epoch."""
    return (t - _EPOCH) // timedelta(microseconds=1)
