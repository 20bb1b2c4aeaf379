"""Schedules declared in code: `fleet.Schedule`, `fleet.Cron`, `fleet.Every`, gathered with the files.

Creating a schedule declares it, the way `@fleet.job` registers a job: `fleetctl apply --app MODULE`
imports MODULE and applies every schedule declared meanwhile, together with the files it is given.
A declaration is checked when it is applied, by the schedules file's own validation, so a field
means the same, has the same default and fails with the same line wherever it is written.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack

from fleet.errors import ScheduleFileError
from fleet.timing.schedfile import MAX_ARGS_BYTES, CatchUp, Overlap, ScheduleSpec, load, parse_entry, shown

Duration = str | int | float | timedelta


class Retry(TypedDict, total=False):
    """The `retry` field: `{"max_attempts": 6, "base": "30s", "cap": "15m"}`, every key optional."""

    max_attempts: int
    base: Duration
    cap: Duration


class ScheduleFields(TypedDict, total=False):
    """The fields of a schedule besides its timing, named and typed as in the schedules file."""

    name: str
    timezone: str
    job: str
    args: Mapping[str, Any]
    start_at: str | datetime
    catchup: CatchUp
    max_catchup: int
    max_lateness: Duration
    grace: Duration
    overlap: Overlap
    timeout: Duration
    retry: Retry
    retention: Duration
    deadline: Duration
    dst_repeated: Literal["first", "last"]
    dst_missing: Literal["shift", "skip"]
    spread: Duration
    exclude: Sequence[str | date]
    until: str | date | datetime


_DECLARED: list[Schedule] = []
_DECLARING = threading.Lock()
_THIS_FILE = os.path.normcase(os.path.abspath(__file__))


class Schedule:
    """A schedule declared in code, with exactly the fields of a `[[schedule]]` table of the file.

    `Schedule(name="nightly", cron="0 2 * * *", timezone="Europe/Berlin", job="reports.nightly")`.
    Creating one declares it; given to `@fleet.job(..., schedule=...)` it runs that job and is
    named after it unless it has a name of its own. Durations are strings such as "5m", numbers
    of seconds or `timedelta`s.
    """

    def __init__(
        self, *, every: Duration | None = None, cron: str | None = None, **fields: Unpack[ScheduleFields]
    ) -> None:
        entry: dict[str, Any] = {"every": every, "cron": cron, **fields}
        # A field left out (or None) is a key the file leaves out: it takes the file's default.
        self.fields: dict[str, Any] = {k: _plain(v) for k, v in entry.items() if v is not None}
        self.place = _declared_at()
        self._conflicts: list[str] = []
        with _DECLARING:
            _DECLARED.append(self)

    @property
    def name(self) -> str | None:
        name = self.fields.get("name")
        return name if isinstance(name, str) else None

    def for_job(self, job: str) -> None:
        """Make this the schedule of job `job` (what `@fleet.job(job, schedule=...)` does): it runs
        `job` and is named after it unless the declaration says otherwise."""
        named = self.fields.get("job")
        if named is None:
            self.fields["job"] = job
        elif named != job:
            self._conflicts.append(f"job: names {named!r} but is the schedule of @fleet.job({job!r})")
        self.fields.setdefault("name", job)

    def check(self, max_args_bytes: int = MAX_ARGS_BYTES) -> tuple[ScheduleSpec | None, list[str]]:
        """The validated spec, or the problems: lines that start with where it was declared."""
        name = self.fields.get("name")
        where = f"schedule {shown(name)}" if isinstance(name, str) and name else "schedule"
        spec, problems = parse_entry(dict(self.fields), where, max_args_bytes)
        problems = [f"{where}: {c}" for c in self._conflicts] + problems
        return (None if problems else spec), [f"{self.place}: {p}" for p in problems]

    def spec(self) -> ScheduleSpec:
        """The validated spec; raises ScheduleFileError with one line per problem."""
        spec, problems = self.check()
        if spec is None:
            raise ScheduleFileError(problems)
        return spec

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.fields.items())
        return f"{type(self).__name__}({inner})"


class Cron(Schedule):
    """A cron schedule: `Cron("0 2 * * *", timezone="Europe/Berlin")`, any other field by keyword."""

    def __init__(self, expression: str, /, **fields: Unpack[ScheduleFields]) -> None:
        super().__init__(cron=expression, **fields)


class Every(Schedule):
    """An interval schedule: `Every("5m")` (slots aligned to the epoch, or to `start_at`)."""

    def __init__(self, interval: Duration, /, **fields: Unpack[ScheduleFields]) -> None:
        super().__init__(every=interval, **fields)


def declared() -> list[Schedule]:
    """Every schedule declared so far in this process, in the order of declaration."""
    with _DECLARING:
        return list(_DECLARED)


def gather(
    files: Sequence[Path], schedules: Sequence[Schedule], max_args_bytes: int = MAX_ARGS_BYTES
) -> list[ScheduleSpec]:
    """The specs of `files` and of `schedules` together, validated as a whole.

    Raises ScheduleFileError with every problem at once: each file's, each declaration's, and each
    name declared twice (within a file, across files, in code, or in code and a file), naming both
    places. A file's lines are prefixed by its path when it is not the only source.
    """
    problems: list[str] = []
    found: list[tuple[str, ScheduleSpec]] = []
    several = len(files) + (1 if schedules else 0) > 1
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            problems.append(
                f"{path}: cannot read: {e.strerror}" if several else f"file: cannot read {path}: {e.strerror}"
            )
            continue
        except UnicodeDecodeError as e:
            why = f"not UTF-8 text (byte {e.start} is {e.object[e.start]:#04x})"
            problems.append(f"{path}: {why}" if several else f"file: {path} is {why}")
            continue
        try:
            found.extend((str(path), spec) for spec in load(text, max_args_bytes))
        except ScheduleFileError as e:
            for p in e.problems:
                if several:
                    p = f"{path}: {p}"
                elif p.startswith("file: "):  # a problem of the whole file names it, even alone
                    p = f"file {path}: {p.removeprefix('file: ')}"
                problems.append(p)
    for schedule in schedules:
        spec, errs = schedule.check(max_args_bytes)
        problems.extend(errs)
        if spec is not None:
            found.append((schedule.place, spec))
    first: dict[str, str] = {}
    for place, spec in found:
        if spec.name in first:
            problems.append(
                f"schedule {spec.name!r}: name: declared twice, at {first[spec.name]} and at {place}"
            )
        else:
            first[spec.name] = place
    if problems:
        raise ScheduleFileError(problems)
    return [spec for _, spec in found]


def _plain(value: Any) -> Any:
    """A field's value as a TOML table would hold it (mappings become dicts, so validation sees them
    as tables)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _declared_at() -> str:
    """`path:line` of the code that created the schedule (outside this module), the path relative to
    the current directory when under it."""
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.normcase(frame.f_code.co_filename) == _THIS_FILE:
        frame = frame.f_back
    path = frame.f_code.co_filename
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:  # another drive
        pass
    return f"{path}:{frame.f_lineno}"
