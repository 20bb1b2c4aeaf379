"""The bounds on a schedule's fields: each input that once flooded the database, jammed a worker or
ended in a traceback is refused in one line naming the field, and nothing else changes."""

from __future__ import annotations

import pytest

from fleet.errors import ScheduleFileError
from fleet.timing.schedfile import load

BASE = 'name = "s"\njob = "noop"\n'


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ('every = "1us"\n', "every"),  # once: 338,000 runs in 8 s
        ('every = "500ms"\n', "every"),
        ('every = "999999999d"\n', "every"),  # once: stored with no next slot, shown OK
        (
            'every = "5m"\nargs = { blob = "' + "x" * 70_000 + '" }\n',
            "args",
        ),  # once: 100 MB copied into every run
        ('every = "5m"\nargs = { a = "x\\u0000y" }\n', "args.a"),  # NUL: jsonb refuses it
        ('every = "5m"\nstart_at = "0001-01-01T00:00:00+05:00"\n', "start_at"),  # once: OverflowError
        ('every = "5m"\nstart_at = "9999-12-31T23:59:59-05:00"\n', "start_at"),
        ('every = "5m"\nstart_at = "1066-10-14T09:00:00Z"\n', "start_at"),
        ('every = "5m"\ntimeout = "99999d"\n', "timeout"),
        ('every = "5m"\nretry = { max_attempts = 1000000000000 }\n', "retry.max_attempts"),
        ('every = "5m"\ncatchup = "all"\nmax_catchup = 0\n', "max_catchup"),
    ],
)
def test_out_of_bounds_fields_are_refused_naming_them(fields: str, field: str) -> None:
    with pytest.raises(ScheduleFileError) as e:
        load("[[schedule]]\n" + BASE + fields)
    assert any(f": {field}:" in p for p in e.value.problems), e.value.problems
    assert all(len(p) < 300 for p in e.value.problems)  # values echoed are cut


def test_a_name_ending_in_a_newline_is_refused() -> None:
    with pytest.raises(ScheduleFileError, match="name"):
        load('[[schedule]]\nname = "s\\n"\njob = "noop"\nevery = "5m"\n')


def test_the_edges_of_the_bounds_are_accepted() -> None:
    (spec,) = load("[[schedule]]\n" + BASE + 'every = "1s"\nargs = { blob = "' + "x" * 60_000 + '" }\n')
    assert spec.timing.every is not None and spec.timing.every.total_seconds() == 1
    (spec,) = load("[[schedule]]\n" + BASE + 'every = "3660d"\nstart_at = "1970-01-02T00:00:00Z"\n')
    assert spec.start_at is not None
    assert load("[[schedule]]\n" + BASE + 'every = "5m"\nargs = { blob = "' + "x" * 70_000 + '" }\n', 100_000)
