"""The schedules file (TOML): parsed and validated as a whole, every problem reported at once.

Schedules declared in code (`fleet.Schedule`) are validated by the same `parse_entry`, so a field
means, defaults and fails the same way wherever it is written.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import itertools
import math
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson

from fleet.errors import ScheduleFileError
from fleet.timing import calendars
from fleet.timing.calendars import Calendar
from fleet.timing.schedule import Timing, TimingError, parse_duration, validate_timing, zone

CatchUp = Literal["skip", "latest", "all"]
Overlap = Literal["allow", "skip", "queue"]
CATCHUPS: tuple[CatchUp, ...] = ("skip", "latest", "all")
OVERLAPS: tuple[Overlap, ...] = ("allow", "skip", "queue")

DEFAULT_CATCHUP: CatchUp = "latest"
DEFAULT_OVERLAP: Overlap = "skip"
DEFAULT_MAX_ATTEMPTS = 6
DEFAULT_MAX_CATCHUP = 1000
MAX_CATCHUP_LIMIT = 100_000
DEFAULT_RETRY_BASE = timedelta(seconds=30)
DEFAULT_RETRY_CAP = timedelta(minutes=15)
MAX_GRACE = timedelta(seconds=60)

# Bounds on what a schedule may ask for: each keeps a typo from flooding the database or a worker.
MIN_EVERY = timedelta(seconds=1)  # finer cadences are a queue's job, not a scheduler's
MAX_EVERY = timedelta(days=3660)  # ten years: anything longer is a typo that would never fire
MAX_ARGS_BYTES = 64 * 1024  # the JSON of `args`, copied into every run (`apply --max-args-bytes`)
MAX_DURATION = MAX_EVERY  # timeout, max_lateness, grace, retry: past this, instants overflow
MAX_ATTEMPTS_LIMIT = 1000
# How long finished runs are kept: at least an hour (a shorter one would remove runs an operator is
# still looking at), at most ten years.
MIN_RETENTION = timedelta(hours=1)
MAX_RETENTION = MAX_EVERY
EARLIEST_START = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_START = datetime(3000, 1, 1, tzinfo=UTC)
_SHOWN_CHARS = 60  # a value echoed in an error is cut to this

# Matched whole (fullmatch): a trailing newline is not part of a valid name.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")
_JOB = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,199}")
_KEYS = {
    "name",
    "cron",
    "every",
    "timezone",
    "job",
    "args",
    "start_at",
    "catchup",
    "max_catchup",
    "max_lateness",
    "grace",
    "overlap",
    "timeout",
    "retry",
    "retention",
    "deadline",
    "dst_repeated",
    "dst_missing",
    "spread",
    "exclude",
    "until",
}
_RETRY_KEYS = {"max_attempts", "base", "cap"}


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """One validated schedule of the file, with every default filled in."""

    name: str
    timing: Timing
    job: str
    args: dict[str, Any] = field(default_factory=dict)
    start_at: datetime | None = None
    catchup: CatchUp = DEFAULT_CATCHUP
    max_catchup: int = DEFAULT_MAX_CATCHUP
    max_lateness: timedelta | None = None
    grace: timedelta | None = None
    overlap: Overlap = DEFAULT_OVERLAP
    timeout: timedelta | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_base: timedelta = DEFAULT_RETRY_BASE
    retry_cap: timedelta = DEFAULT_RETRY_CAP
    retention: timedelta | None = None  # None: the tickers' --retention
    deadline: timedelta | None = None  # each slot's run is done by slot + deadline, or OVERDUE
    spread: timedelta | None = None  # None: runs start at their slots

    def spread_offset(self) -> timedelta:
        """How long after its slot each run of this schedule becomes claimable (`spread_offset`)."""
        return spread_offset(self.name, self.spread)

    calendar: Calendar | None = None  # exclude and until (fleet.timing.calendars)

    def timing_hash(self) -> str:
        """Changes exactly when the slot times change (so apply re-plans the next slot)."""
        t = self.timing
        key: list[Any] = [
            t.every.total_seconds() if t.every else None,
            t.cron,
            t.timezone,
            self.start_at.isoformat() if self.start_at else None,
            t.dst_repeated,
            t.dst_missing,
        ]
        if self.calendar is not None:  # left out without one: the hashes stored before it stay
            key.append(self.calendar.to_json())
        return hashlib.sha256(orjson.dumps(key)).hexdigest()[:16]


def spread_offset(name: str, spread: timedelta | None) -> timedelta:
    """Where in [0, spread) a schedule's runs start after their slots: a hash of its name (SHA-256),
    in whole milliseconds, so every ticker and every restart gives the same offset, and schedules
    of one cadence spread evenly over the spread."""
    if spread is None:
        return timedelta(0)
    steps = spread // timedelta(milliseconds=1)
    if steps <= 0:
        return timedelta(0)
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return timedelta(milliseconds=digest % steps)


def default_grace(interval: timedelta) -> timedelta:
    """How late a slot may be materialised and still count as on time: min(60 s, interval / 2)."""
    return min(MAX_GRACE, interval / 2)


def parse_toml(text: str) -> dict[str, Any]:
    """`text` parsed as TOML; ValueError saying what is wrong: tomllib's message, or that values
    nest too deeply (which tomllib meets as Python's recursion limit)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(str(e)) from None
    except RecursionError:
        raise ValueError("arrays or tables nested too deeply") from None


def load(text: str, max_args_bytes: int = MAX_ARGS_BYTES) -> list[ScheduleSpec]:
    """Parse and validate a whole file; raises ScheduleFileError listing every problem."""
    try:
        return _validate(_slices(text), max_args_bytes)
    except _NotSliceable:
        pass
    try:
        doc = parse_toml(text)
    except ValueError as e:
        raise ScheduleFileError([f"file: not valid TOML: {e}"]) from None
    return _validate(iter([doc]), max_args_bytes)


# A file of a million schedules is parsed a slice of [[schedule]] tables at a time, each slice's tables
# validated into specs and dropped before the next is parsed: memory holds the specs, not the whole
# parsed document beside them. A slice starts at a line that is exactly a [[schedule]] header.
SLICE_TABLES = 2000
_HEADER_LINE = re.compile(r"^\[\[schedule\]\][ \t]*(?:#[^\n]*)?\r?$", re.MULTILINE)


class _NotSliceable(Exception):
    """A slice is not TOML by itself (a header line inside a multi-line string, or the file is not
    valid TOML), or one beside the first has a top-level key of its own: the whole text is parsed at
    once instead, which says what is wrong where."""


def _slices(text: str) -> Iterator[dict[str, Any]]:
    """The documents of the text's slices in order: the first holds what precedes the first header
    too. When every slice parses and only the first has top-level keys other than `schedule`, they
    hold the tables the whole document holds, in the same order."""
    cut = 0
    for i, header in enumerate(_HEADER_LINE.finditer(text)):
        if i and i % SLICE_TABLES == 0:
            yield _slice(text[cut : header.start()], first=cut == 0)
            cut = header.start()
    yield _slice(text[cut:], first=cut == 0)


def _slice(text: str, first: bool) -> dict[str, Any]:
    try:
        doc = parse_toml(text)
    except ValueError:
        raise _NotSliceable from None
    if not first and doc.keys() != {"schedule"}:
        raise _NotSliceable
    return doc


def _validate(docs: Iterator[dict[str, Any]], max_args_bytes: int) -> list[ScheduleSpec]:
    """The specs of the documents' [[schedule]] tables, numbered across them; ScheduleFileError
    with every problem."""
    first = next(docs)
    problems: list[str] = []
    unknown_top = sorted(set(first) - {"schedule", "alert"})
    if unknown_top:
        problems.append(
            f"file: unknown top-level key(s) {', '.join(unknown_top)} "
            "(expected [[schedule]] and [[alert]] tables)"
        )
    if not isinstance(first.get("schedule", []), list):
        raise ScheduleFileError(problems + ["file: 'schedule' must be an array of tables ([[schedule]])"])
    specs: list[ScheduleSpec] = []
    seen: dict[str, int] = {}
    i = 0
    for doc in itertools.chain([first], docs):
        for entry in doc.get("schedule", []):
            i += 1
            where = f"schedule #{i}"
            if not isinstance(entry, dict):
                problems.append(f"{where}: must be a table")
                continue
            name = entry.get("name")
            if isinstance(name, str) and name:
                where = f"schedule {shown(name)}"
            spec, errs = parse_entry(entry, where, max_args_bytes)
            problems.extend(errs)
            if isinstance(name, str) and name:
                if name in seen:
                    problems.append(f"{where}: name: declared twice, at [[schedule]] #{seen[name]} and #{i}")
                seen.setdefault(name, i)
            if spec is not None:
                specs.append(spec)
    if problems:
        raise ScheduleFileError(problems)
    return specs


def _non_finite(value: Any, path: str) -> list[tuple[str, float]]:
    """Where `value` holds inf or nan (TOML has them, JSON does not: they would become null)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(path, value)]
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in _non_finite(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _non_finite(v, f"{path}[{i}]")]
    return []


def _duration(value: Any, fieldname: str) -> timedelta:
    """A duration as the file writes it, or a `timedelta` (from code); TimingError names the field."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return _text_duration(value, fieldname)
    return parse_duration(value, fieldname)


# A large file repeats a few durations ("5m", "1h") thousands of times; parsing one is not cheap.
_text_duration = functools.lru_cache(maxsize=1024)(parse_duration)


def shown(value: Any) -> str:
    """A value as an error line echoes it: repr, control characters escaped, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _nul(value: Any, path: str) -> list[str]:
    """Where `value` holds a NUL character, in a key or a string."""
    if isinstance(value, str):
        return [path] if "\x00" in value else []
    if isinstance(value, dict):
        found = [f"{path} key {shown(k)}" for k in value if isinstance(k, str) and "\x00" in k]
        return found + [f for k, v in value.items() for f in _nul(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _nul(v, f"{path}[{i}]")]
    return []


def args_json(
    args: dict[str, Any], field: str, max_bytes: int = MAX_ARGS_BYTES, hint: str = ""
) -> tuple[bytes | None, list[str]]:
    """`args` as the JSON a run stores (None when JSON cannot hold them), and what keeps them from
    being stored, each ``"{field}...: why"``: a value JSON cannot hold (inf, nan, an object), a NUL
    character (PostgreSQL's jsonb cannot store one), more than `max_bytes` bytes of JSON (`hint`
    after that one: how to raise the bound)."""
    try:
        encoded = orjson.dumps(args)
    except TypeError as e:  # orjson.JSONEncodeError: a type JSON cannot hold, or nested too deep
        return None, [f"{field}: not representable as JSON: {e}"]
    # the walks recurse only as deep as orjson accepted
    problems = [f"{path}: not representable as JSON: {value}" for path, value in _non_finite(args, field)]
    problems += [
        f"{path}: holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store"
        for path in _nul(args, field)
    ]
    if len(encoded) > max_bytes:
        problems.append(f"{field}: {len(encoded):,} bytes of JSON, more than {max_bytes:,}{hint}")
    return encoded, problems


def unknown_field(key: str, known: set[str], where: str = "") -> str:
    """The problem of an unknown field (`where`: of what, such as " for kind webhook"), naming the
    known one it most likely misspells."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f"unknown field{where}" + (f" (did you mean {close[0]}?)" if close else "")


# What a schedule's (and an alert route's) name may hold.
NAME_CHARS = "letters, digits and . _ : @ -"


def text_field(
    bad: Callable[[str, str], None], field: str, value: Any, pattern: re.Pattern[str], what: str, form: str
) -> None:
    """A required text field: missing, not a string, or not of its `form` (what `pattern` matches),
    each said as it is."""
    if value is None:
        bad(field, f"required; {what}")
    elif not isinstance(value, str):
        bad(field, f"must be a string: {what}, got {shown(value)}")
    elif not pattern.fullmatch(value):
        bad(field, f"must be {what}: {form}, got {shown(value)}")


def parse_entry(
    entry: dict[str, Any], where: str, max_args_bytes: int = MAX_ARGS_BYTES
) -> tuple[ScheduleSpec | None, list[str]]:
    """One schedule's fields (as a `[[schedule]]` table holds them) validated into a spec, or the
    problems found, each a line `"{where}: {field}: {message}"`."""
    errs: list[str] = []

    def bad(fieldname: str, msg: str) -> None:
        errs.append(f"{where}: {fieldname}: {msg}")

    for key in sorted(set(entry) - _KEYS):
        bad(key, unknown_field(key, _KEYS))
    # A field that is there but wrong is said to be wrong, not missing.
    name, job = entry.get("name"), entry.get("job")
    first = "the first a letter or a digit"
    text_field(bad, "name", name, _NAME, NAME_CHARS, f"at most 200 characters, {first}")
    text_field(
        bad,
        "job",
        job,
        _JOB,
        "the name of a job registered on the workers",
        "letters, digits and . _ : - (at most 200 characters, the first a letter, a digit or _)",
    )
    args = entry.get("args", {})
    if not isinstance(args, dict):
        bad("args", "must be a table")
        args = {}
    else:
        encoded, problems = args_json(args, "args", max_args_bytes, " (apply --max-args-bytes)")
        errs.extend(f"{where}: {problem}" for problem in problems)
        if encoded is not None:
            args = orjson.loads(encoded)  # TOML dates become ISO strings

    def duration(key: str, positive: bool = True) -> timedelta | None:
        if key not in entry:
            return None
        try:
            d = _duration(entry[key], key)
        except TimingError as e:
            errs.append(f"{where}: {e}")
            return None
        if positive and d <= timedelta(0):
            bad(key, "must be positive")
            return None
        if d > MAX_DURATION:
            bad(key, f"at most {MAX_DURATION.days} days, got {shown(entry[key])}")
            return None
        return d

    def choice(key: str, options: tuple[str, ...], default: str) -> str:
        value = entry.get(key, default)
        if value not in options:
            bad(key, f"must be one of {' | '.join(options)}, got {shown(value)}")
            return default
        return str(value)

    catchup = choice("catchup", CATCHUPS, DEFAULT_CATCHUP)
    max_catchup = entry.get("max_catchup", DEFAULT_MAX_CATCHUP)
    if (
        not isinstance(max_catchup, int)
        or isinstance(max_catchup, bool)
        or not (1 <= max_catchup <= MAX_CATCHUP_LIMIT)
    ):
        bad("max_catchup", f"must be an integer from 1 to {MAX_CATCHUP_LIMIT:,}, got {shown(max_catchup)}")
        max_catchup = DEFAULT_MAX_CATCHUP
    overlap = choice("overlap", OVERLAPS, DEFAULT_OVERLAP)
    max_lateness = duration("max_lateness")
    grace = duration("grace")
    timeout = duration("timeout")
    retention = duration("retention")
    deadline = duration("deadline")
    spread = duration("spread", positive=False)
    if retention is not None and not MIN_RETENTION <= retention <= MAX_RETENTION:
        bad("retention", f"must be from 1h to {MAX_RETENTION.days} days, got {shown(entry['retention'])}")
        retention = None

    # the timing is checked as a whole (the cron expression among it) when its own fields are
    # valid, whatever the other fields' problems: every problem is reported at once
    before_timing = len(errs)
    dst_repeated = choice("dst_repeated", ("first", "last"), "first")
    dst_missing = choice("dst_missing", ("shift", "skip"), "shift")
    tz = entry.get("timezone", "UTC")
    tz_ok = True
    if not isinstance(tz, str):
        bad("timezone", "must be a string such as 'Europe/Berlin'")
        tz, tz_ok = "UTC", False
    else:
        try:
            zone(tz)
        except TimingError as e:
            errs.append(f"{where}: {e}")
            tz_ok = False

    start_at = _start_at(entry.get("start_at"), tz if tz_ok else "UTC", bad)

    every: timedelta | None = None
    cron = entry.get("cron")
    if "every" in entry:
        try:
            every = _duration(entry["every"], "every")
            if every <= timedelta(0):
                bad("every", "must be positive")
            elif every < MIN_EVERY:
                bad(
                    "every",
                    f"at least 1s, got {shown(entry['every'])} (for finer work, run a loop in one job)",
                )
            elif every > MAX_EVERY:
                bad("every", f"at most {MAX_EVERY.days} days, got {shown(entry['every'])}")
        except TimingError as e:
            errs.append(f"{where}: {e}")
    if cron is not None and not isinstance(cron, str):
        bad("cron", "must be a string such as '*/5 * * * *'")
        cron = None
    if ("cron" in entry) == ("every" in entry):
        bad("cron/every", "give exactly one of cron or every")
    timing = Timing(
        every=every,
        cron=cron,
        timezone=tz if isinstance(tz, str) else "UTC",
        anchor=start_at,
        dst_repeated=dst_repeated,  # type: ignore[arg-type]
        dst_missing=dst_missing,  # type: ignore[arg-type]
    )
    if len(errs) == before_timing:
        try:
            validate_timing(timing)
        except TimingError as e:
            errs.append(f"{where}: {e}")
        else:
            if spread is not None and every is not None and spread >= every:
                bad(
                    "spread",
                    f"must be less than the interval ({shown(entry['every'])}), got {shown(entry['spread'])}",
                )
    if spread is not None and spread <= timedelta(0):
        spread = None  # "0s": no spread
    # The calendar (exclude, until) filters the timing's slots, and is no part of it: its problems
    # are checked after the timing's, so that neither hides the other's.
    calendar = calendars.parse(entry.get("exclude"), entry.get("until"), tz if tz_ok else "UTC", bad)
    if calendar is not None and start_at is not None and calendar.ended(start_at):
        bad("until", f"{calendar.until.isoformat() if calendar.until else ''} is before start_at")

    retry = entry.get("retry", {})
    max_attempts, base, cap = DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_BASE, DEFAULT_RETRY_CAP
    if not isinstance(retry, dict):
        bad("retry", 'must be a table such as { max_attempts = 6, base = "30s", cap = "15m" }')
    else:
        for key in sorted(set(retry) - _RETRY_KEYS):
            bad(f"retry.{key}", unknown_field(key, _RETRY_KEYS))
        ma = retry.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
        if not isinstance(ma, int) or isinstance(ma, bool) or not 1 <= ma <= MAX_ATTEMPTS_LIMIT:
            bad("retry.max_attempts", f"must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}, got {shown(ma)}")
        else:
            max_attempts = ma
        for key in ("base", "cap"):
            if key in retry:
                try:
                    d = _duration(retry[key], f"retry.{key}")
                    if d <= timedelta(0):
                        bad(f"retry.{key}", "must be positive")
                    elif d > MAX_DURATION:
                        bad(f"retry.{key}", f"at most {MAX_DURATION.days} days, got {shown(retry[key])}")
                    elif key == "base":
                        base = d
                    else:
                        cap = d
                except TimingError as e:
                    errs.append(f"{where}: {e}")
        if base > cap:
            bad("retry.base", "must not exceed retry.cap")

    if errs:
        return None, errs
    return (
        ScheduleSpec(
            name=str(name),
            timing=timing,
            job=str(job),
            args=args,
            start_at=start_at,
            catchup=catchup,  # type: ignore[arg-type]
            max_catchup=max_catchup,
            max_lateness=max_lateness,
            grace=grace,
            overlap=overlap,  # type: ignore[arg-type]
            timeout=timeout,
            max_attempts=max_attempts,
            retry_base=base,
            retry_cap=cap,
            retention=retention,
            deadline=deadline,
            spread=spread,
            calendar=calendar,
        ),
        [],
    )


def _start_at(value: Any, tz: str, bad: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError:
            bad("start_at", f"not an ISO-8601 date-time: {shown(value)}")
            return None
    else:
        bad("start_at", "must be an ISO-8601 date-time such as '2026-11-01T00:00:00Z'")
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=zone(tz))  # read in the schedule's time zone
    try:
        in_range = EARLIEST_START <= dt <= LATEST_START
    except OverflowError:  # an offset that takes year 1 or 9999 out of range
        in_range = False
    if not in_range:
        bad(
            "start_at",
            f"between 1970 and 3000, got {shown(value if isinstance(value, str) else dt.isoformat())}",
        )
        return None
    return dt
