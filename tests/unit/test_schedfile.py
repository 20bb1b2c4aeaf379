"""The schedules file: defaults, and one message per problem naming schedule and field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.errors import ScheduleFileError
from fleet.timing.schedfile import load

FULL = """
[[schedule]]
name = "nightly-report"
cron = "0 2 * * *"
timezone = "Europe/Berlin"
job = "reports.nightly"
args = { format = "pdf" }
start_at = "2026-11-01T00:00:00Z"
catchup = "latest"
max_lateness = "1h"
overlap = "skip"
timeout = "10m"
retry = { max_attempts = 6, base = "30s", cap = "15m" }
"""


def test_the_design_example_parses() -> None:
    (s,) = load(FULL)
    assert (
        s.name == "nightly-report" and s.timing.cron == "0 2 * * *" and s.timing.timezone == "Europe/Berlin"
    )
    assert (
        s.args == {"format": "pdf"}
        and s.max_lateness == timedelta(hours=1)
        and s.timeout == timedelta(minutes=10)
    )
    assert s.start_at == datetime(2026, 11, 1, tzinfo=UTC)


def test_defaults() -> None:
    (s,) = load('[[schedule]]\nname = "a"\nevery = "5m"\njob = "j"\n')
    assert (s.catchup, s.overlap, s.timing.timezone, s.max_lateness) == ("latest", "skip", "UTC", None)
    assert (s.max_attempts, s.retry_base, s.retry_cap) == (6, timedelta(seconds=30), timedelta(minutes=15))


def test_retention_is_the_tickers_default_unless_given() -> None:
    (a, b, c) = load(
        '[[schedule]]\nname = "a"\nevery = "5m"\njob = "j"\n'
        '[[schedule]]\nname = "b"\nevery = "5m"\njob = "j"\nretention = "1h"\n'
        '[[schedule]]\nname = "c"\nevery = "5m"\njob = "j"\nretention = "3660d"\n'
    )
    assert (a.retention, b.retention, c.retention) == (None, timedelta(hours=1), timedelta(days=3660))


def test_start_at_without_offset_is_read_in_the_schedule_zone() -> None:
    (s,) = load(
        '[[schedule]]\nname = "a"\ncron = "0 2 * * *"\ntimezone = "Europe/Berlin"\njob = "j"\n'
        'start_at = "2026-07-01T00:00:00"\n'
    )
    assert s.start_at is not None and s.start_at.utcoffset() == timedelta(hours=2)


def test_timing_hash_changes_only_with_timing() -> None:
    (a,) = load('[[schedule]]\nname = "a"\nevery = "5m"\njob = "j"\n')
    (b,) = load('[[schedule]]\nname = "a"\nevery = "5m"\njob = "other"\ncatchup = "all"\n')
    (c,) = load('[[schedule]]\nname = "a"\nevery = "6m"\njob = "j"\n')
    assert a.timing_hash() == b.timing_hash() != c.timing_hash()


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ('name = "bad name!"\nevery = "1m"\njob = "j"', "name"),
        ('name = "a"\nevery = "1m"', "job"),
        ('name = "a"\nevery = "1m"\njob = "j"\nargs = 3', "args"),
        ('name = "a"\nevery = "1m"\njob = "j"\nargs = { limits = [1, inf] }', "args.limits[1]"),
        ('name = "a"\nevery = "1m"\njob = "j"\nargs = { x = { y = nan } }', "args.x.y"),
        ('name = "a"\nevery = "1m"\njob = "j"\nretry = { base = "1m", cap = "30s" }', "retry.base"),
        ('name = "a"\nevery = "1m"\njob = "j"\nretry = { max_attempts = "six" }', "retry.max_attempts"),
        ('name = "a"\nevery = "1m"\njob = "j"\nstart_at = "yesterday"', "start_at"),
        ('name = "a"\nevery = "1m"\njob = "j"\ndst_repeated = "both"', "dst_repeated"),
        ('name = "a"\nevery = "1m"\njob = "j"\nmax_lateness = "0s"', "max_lateness"),
        ('name = "a"\nevery = "1m"\njob = "j"\nretention = "59m"', "retention"),
        ('name = "a"\nevery = "1m"\njob = "j"\nretention = "3661d"', "retention"),
        ('name = "a"\nevery = "1m"\njob = "j"\nretention = "forever"', "retention"),
        ('name = "a"\nevery = "1m"\njob = "j"\nretention = 0', "retention"),
    ],
)
def test_problems_name_the_field(entry: str, field: str) -> None:
    with pytest.raises(ScheduleFileError) as e:
        load(f"[[schedule]]\n{entry}\n")
    assert any(f": {field}:" in p for p in e.value.problems), e.value.problems


@pytest.mark.parametrize(
    ("other", "field"),
    [('timeout = "5x"', "timeout"), ('ovarlap = "skip"', "ovarlap"), ("retry = 3", "retry")],
)
def test_a_bad_cron_is_reported_beside_the_other_fields_problems(other: str, field: str) -> None:
    with pytest.raises(ScheduleFileError) as e:
        load(f'[[schedule]]\nname = "c"\ncron = "61 * * * *"\njob = "j"\n{other}\n')
    assert sorted(p.split(": ")[1] for p in e.value.problems) == sorted([field, "cron"])


def test_a_timing_is_not_checked_whole_while_one_of_its_fields_is_bad() -> None:
    # a bad time zone is the one problem named, not also a cron "error" that follows from it
    with pytest.raises(ScheduleFileError) as e:
        load('[[schedule]]\nname = "c"\ncron = "0 2 * * *"\ntimezone = "Mars/Base"\njob = "j"\n')
    assert [p.split(": ")[1] for p in e.value.problems] == ["timezone"]


def test_a_repeated_name_is_reported_even_when_the_repeat_has_other_problems() -> None:
    with pytest.raises(ScheduleFileError) as e:
        load(
            '[[schedule]]\nname = "d"\nevery = "1m"\njob = "j"\n'
            '[[schedule]]\nname = "d"\ncron = "61 * * * *"\njob = "j"\n'
        )
    assert "schedule 'd': name: declared twice, at [[schedule]] #1 and #2" in e.value.problems
    assert any(": cron:" in p for p in e.value.problems), e.value.problems


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        ("evry", "evry: unknown field (did you mean every?)"),
        ("retry = { max_atempts = 2 }\nx", "retry.max_atempts: unknown field (did you mean max_attempts?)"),
        ("colour", "colour: unknown field"),
    ],
)
def test_an_unknown_field_names_the_field_it_most_likely_misspells(field: str, problem: str) -> None:
    with pytest.raises(ScheduleFileError) as e:
        load(f'[[schedule]]\nname = "c"\ncron = "0 2 * * *"\njob = "j"\n{field} = "5m"\n')
    assert f"schedule 'c': {problem}" in e.value.problems, e.value.problems


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # a bad `until` or `exclude` does not keep the timing (and the spread against it) unchecked
        ('every = "5m"\nspread = "1h"\nuntil = 5', ["spread", "until"]),
        ('every = "5m"\nspread = "1h"\nexclude = "2026-12-25"', ["spread", "exclude"]),
        ('cron = "61 * * * *"\nuntil = "soon"', ["cron", "until"]),
        ('cron = "61 * * * *"\nexclude = ["someday"]', ["cron", "exclude[0]"]),
    ],
)
def test_a_bad_calendar_is_reported_beside_the_timings_problems(fields: str, expected: list[str]) -> None:
    with pytest.raises(ScheduleFileError) as e:
        load(f'[[schedule]]\nname = "c"\njob = "j"\n{fields}\n')
    assert sorted(p.split(": ")[1] for p in e.value.problems) == sorted(expected), e.value.problems


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ('every = "1m"', "job: required; the name of a job registered on the workers"),
        (
            'every = "1m"\njob = 7',
            "job: must be a string: the name of a job registered on the workers, got 7",
        ),
        (
            'every = "1m"\njob = ["j"]',
            "job: must be a string: the name of a job registered on the workers, got ['j']",
        ),
        (
            'every = "1m"\njob = "a job"',
            "job: must be the name of a job registered on the workers: letters, digits and . _ : - "
            "(at most 200 characters, the first a letter, a digit or _), got 'a job'",
        ),
    ],
)
def test_a_job_of_the_wrong_type_is_not_said_to_be_missing(fields: str, problem: str) -> None:
    with pytest.raises(ScheduleFileError) as e:
        load(f'[[schedule]]\nname = "a"\n{fields}\n')
    assert e.value.problems == [f"schedule 'a': {problem}"]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ("", "schedule #1: name: required; letters, digits and . _ : @ -"),
        ("name = 7", "schedule #1: name: must be a string: letters, digits and . _ : @ -, got 7"),
        (
            'name = "bad name!"',
            "schedule 'bad name!': name: must be letters, digits and . _ : @ -: at most 200 characters, "
            "the first a letter or a digit, got 'bad name!'",
        ),
        (
            'name = "-a"',
            "schedule '-a': name: must be letters, digits and . _ : @ -: at most 200 characters, the first "
            "a letter or a digit, got '-a'",
        ),
    ],
)
def test_a_name_of_the_wrong_type_is_not_said_to_be_missing(fields: str, problem: str) -> None:
    with pytest.raises(ScheduleFileError) as e:
        load(f'[[schedule]]\n{fields}\nevery = "1m"\njob = "j"\n')
    assert e.value.problems == [problem]
