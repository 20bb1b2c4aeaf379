"""Who did what: the audit rows an operator's action on a schedule leaves (pause, resume, trigger,
retry, discard, backfill, apply), written in the transaction of the change they record, and read
back by `fleetctl audit`, `fleet.Client.audit` and the dashboard.

A row holds when (the database's now()), the database role (current_user: neither can be written
by an operator), who the operator says they are (`by`, optional), the action, the schedule, a note
and a small JSON object of details (the slots retried, the fields an apply changed, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import orjson
import psycopg
from psycopg.types.json import Jsonb

from fleet.errors import RequestError
from fleet.store.queries import q

Action = Literal["pause", "resume", "trigger", "retry", "discard", "backfill", "apply"]
ACTIONS: Final[tuple[Action, ...]] = ("pause", "resume", "trigger", "retry", "discard", "backfill", "apply")
MAX_BY_CHARS: Final = 100
# An operator's note is one short line for people (a pause's note is the same text).
MAX_NOTE_CHARS: Final = 500
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 10_000
# Slots listed in a row's details (the rest are counted); values an apply changed are cut to this.
MAX_SLOTS_LISTED: Final = 20
MAX_VALUE_CHARS: Final = 200


def check_by(by: str | None, field: str = "by") -> str | None:
    """`by` stripped (None when empty); RequestError naming `field` when it is longer than 100
    characters or holds a control character."""
    if by is None or not by.strip():
        return None
    by = by.strip()
    if len(by) > MAX_BY_CHARS:
        raise RequestError(f"{field}: at most {MAX_BY_CHARS} characters, got {len(by)}")
    if not by.isprintable():
        raise RequestError(f"{field}: must not hold control characters, got {by!r}"[:200])
    return by


def check_note(note: str | None, field: str = "--note") -> str | None:
    """The note stripped (None when empty); RequestError naming `field` when it is too long."""
    if note is None or not note.strip():
        return None
    if len(note) > MAX_NOTE_CHARS:
        raise RequestError(f"{field}: at most {MAX_NOTE_CHARS} characters, got {len(note)}")
    if "\x00" in note:
        raise RequestError(f"{field}: holds a NUL character")
    return note.strip()


def slots_detail(slots: Sequence[datetime]) -> dict[str, Any]:
    """The details of an action on slots: how many, and the first MAX_SLOTS_LISTED of them."""
    return {"count": len(slots), "slots": [_iso(s) for s in slots[:MAX_SLOTS_LISTED]]}


def value_text(text: str) -> str:
    """A value as a row's details hold it: cut to MAX_VALUE_CHARS."""
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def audit_record(
    conn: psycopg.Connection[Any],
    action: Action,
    schedules: Sequence[str | None],
    details: Sequence[dict[str, Any]],
    *,
    by: str | None,
    note: str | None = None,
) -> None:
    """Add one row per schedule (its details beside it), in the caller's transaction."""
    if not schedules:
        return
    conn.execute(
        q("audit_insert"),
        {
            "by": by,
            "action": action,
            "note": note,
            "schedules": list(schedules),
            "details": [Jsonb(d, dumps=_dumps) for d in details],
        },
    )


@dataclass(frozen=True)
class AuditRow:
    """One audit row: who did what to which schedule, when."""

    #: Its number: increases with every row written.
    id: int
    #: When (the database's now() of the change's transaction), in UTC.
    at: datetime
    #: The database role that made the change.
    role: str
    #: Who the operator said they are (`--by`, `by=`), or None.
    by: str | None
    #: pause, resume, trigger, retry, discard, backfill or apply.
    action: str
    #: The schedule (None for an apply too large to record per schedule).
    schedule: str | None
    #: The operator's note, or None.
    note: str | None
    #: What was done: the slots, the fields changed, the outcome.
    details: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": _iso(self.at),
            "role": self.role,
            "by": self.by,
            "action": self.action,
            "schedule": self.schedule,
            "note": self.note,
            "details": self.details,
        }


def audit_list(
    conn: psycopg.Connection[Any],
    schedule: str | None = None,
    since: datetime | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[AuditRow]:
    """The newest audit rows first: of `schedule` (with the fleet-wide rows of large applies) or of
    every schedule, from `since` on, at most `limit`."""
    if not 1 <= limit <= MAX_LIMIT:
        raise RequestError(f"limit: must be from 1 to {MAX_LIMIT}, got {limit}")
    rows = conn.execute(q("audit_list"), {"schedule": schedule, "since": since, "limit": limit}).fetchall()
    return [
        AuditRow(
            id=r["id"],
            at=r["at"].astimezone(UTC),
            role=r["role"],
            by=r["by_name"],
            action=r["action"],
            schedule=r["schedule"],
            note=r["note"],
            details=r["details"] if isinstance(r["details"], dict) else {},
        )
        for r in rows
    ]


def summary(row: AuditRow) -> str:
    """The details in a few words: ``2 slot(s): 2026-11-02T10:00:00Z, ...`` or ``update: timeout``."""
    d = row.details
    parts: list[str] = []
    if "outcome" in d:
        parts.append(str(d["outcome"]))
    fields = d.get("fields")
    if isinstance(fields, dict) and fields:
        parts.append(
            ", ".join(
                f"{k} {v[0]} -> {v[1]}" if isinstance(v, list) and len(v) == 2 else str(k)
                for k, v in fields.items()
            )
        )
    if "count" in d and "slots" in d:
        slots = d["slots"] if isinstance(d["slots"], list) else []
        more = int(d["count"]) - len(slots) if isinstance(d["count"], int) else 0
        parts.append(
            f"{d['count']} slot(s): {', '.join(map(str, slots))}" + (f" and {more} more" if more > 0 else "")
        )
    for key in ("slot", "next_slot", "timing", "from", "to", "args"):
        if key in d:
            parts.append(f"{key.replace('_', ' ')} {d[key]}")
    for key in ("created", "updated", "replanned", "disabled"):
        if key in d and not row.schedule:
            parts.append(f"{d[key]} {key}")
    return "; ".join(parts)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
