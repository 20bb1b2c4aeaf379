"""Schedules declared in code: the same fields, defaults and errors as the schedules file."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import fleet
from fleet import declare, jobs
from fleet.admin.apply import ApplyResult, _same_json
from fleet.errors import ScheduleFileError
from fleet.health.verdicts import verdict_text
from fleet.ops import apply_report
from fleet.timing.schedfile import load

HERE = Path(__file__).name


@pytest.fixture(autouse=True)
def fresh_registries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test declares into empty registries (jobs and schedules), as a fresh process would."""
    monkeypatch.setattr(declare, "_DECLARED", [])
    monkeypatch.setattr(jobs, "_REGISTRY", {})
    yield


FULL_TOML = """
[[schedule]]
name = "nightly-report"
cron = "0 2 * * *"
timezone = "Europe/Berlin"
job = "reports.nightly"
args = { format = "pdf", pages = [1, 2] }
start_at = "2026-11-01T00:00:00Z"
catchup = "all"
max_lateness = "1h"
grace = "30s"
overlap = "queue"
timeout = "10m"
retry = { max_attempts = 3, base = "10s", cap = "5m" }
dst_repeated = "last"
dst_missing = "skip"
deadline = "45m"
exclude = ["2026-12-25", 2026-12-31]
until = 2027-06-30
"""


def test_every_field_of_the_file_means_the_same_in_code() -> None:
    (from_file,) = load(FULL_TOML)
    in_code = fleet.Schedule(
        name="nightly-report",
        cron="0 2 * * *",
        timezone="Europe/Berlin",
        job="reports.nightly",
        args={"format": "pdf", "pages": [1, 2]},
        start_at="2026-11-01T00:00:00Z",
        catchup="all",
        max_lateness="1h",
        grace=timedelta(seconds=30),
        overlap="queue",
        timeout=600,
        retry=fleet.Retry(max_attempts=3, base="10s", cap=timedelta(minutes=5)),
        dst_repeated="last",
        dst_missing="skip",
        deadline="45m",
        exclude=["2026-12-25", "2026-12-31"],
        until="2027-06-30",
    )
    assert in_code.spec() == from_file and from_file.deadline == timedelta(minutes=45)
    cron = fleet.Cron(
        "0 2 * * *",
        name="nightly-report",
        timezone="Europe/Berlin",
        job="reports.nightly",
        args={"format": "pdf", "pages": [1, 2]},
        start_at=datetime(2026, 11, 1, tzinfo=UTC),
        catchup="all",
        max_lateness="1h",
        grace="30s",
        overlap="queue",
        timeout="10m",
        retry={"max_attempts": 3, "base": "10s", "cap": "5m"},
        dst_repeated="last",
        dst_missing="skip",
        deadline=timedelta(minutes=45),
        exclude=(date(2026, 12, 25), "2026-12-31"),
        until=date(2027, 6, 30),
    )
    assert cron.spec() == from_file


def test_defaults_are_the_file_defaults() -> None:
    (from_file,) = load('[[schedule]]\nname = "a"\nevery = "5m"\njob = "j"\n')
    assert fleet.Every("5m", name="a", job="j").spec() == from_file


def test_a_job_schedule_runs_that_job_and_is_named_after_it() -> None:
    @fleet.job("reports.nightly", schedule=fleet.Cron("0 2 * * *", timezone="Europe/Berlin"))
    def nightly(ctx: fleet.JobContext) -> None:
        pass

    @fleet.job("tick", schedule=[fleet.Every("5m"), fleet.Every("1h", name="tick-hourly", args={"n": 1})])
    def tick(ctx: fleet.JobContext) -> None:
        pass

    specs = [s.spec() for s in declare.declared()]
    assert [(s.name, s.job) for s in specs] == [
        ("reports.nightly", "reports.nightly"),
        ("tick", "tick"),
        ("tick-hourly", "tick"),
    ]
    assert specs[0].timing.cron == "0 2 * * *" and specs[0].timing.timezone == "Europe/Berlin"
    assert specs[2].timing.every == timedelta(hours=1) and specs[2].args == {"n": 1}
    assert jobs.registered() == {"reports.nightly": nightly, "tick": tick}


def test_a_module_level_schedule_is_declared_where_it_is_created() -> None:
    s = fleet.Schedule(name="cleanup", every="1h", job="cleanup.run")
    line = s.place.rsplit(":", 1)[1]
    assert s.place.endswith(f"{HERE}:{line}") and int(line) > 0
    assert declare.declared() == [s]


def test_an_invalid_declaration_fails_with_the_files_line_after_its_place() -> None:
    with pytest.raises(ScheduleFileError) as from_file:
        load('[[schedule]]\nname = "x"\nevery = "0s"\njob = "j"\n')
    s = fleet.Every("0s", name="x", job="j")
    spec, problems = s.check()
    assert spec is None
    assert problems == [f"{s.place}: {p}" for p in from_file.value.problems]
    assert problems[0].endswith("schedule 'x': every: must be positive")
    with pytest.raises(ScheduleFileError):
        s.spec()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": "1m", "cron": "* * * * *"}, "cron/every"),
        ({}, "cron/every"),
        ({"every": "1m", "catchup": "some"}, "catchup"),
        ({"every": "1m", "timeout": timedelta(seconds=-1)}, "timeout"),
        ({"every": "1m", "retry": {"max_attempts": 0}}, "retry.max_attempts"),
        ({"every": "1m", "retries": 3}, "retries"),
        ({"every": "1m", "args": {"x": float("nan")}}, "args.x"),
    ],
)
def test_each_problem_names_schedule_and_field(fields: dict[str, Any], field: str) -> None:
    _, problems = fleet.Schedule(name="x", job="j", **fields).check()
    assert any(f"schedule 'x': {field}:" in p for p in problems), problems


def test_a_job_schedule_naming_another_job_is_a_problem() -> None:
    @fleet.job("a", schedule=fleet.Every("5m", job="b"))
    def a(ctx: fleet.JobContext) -> None:
        pass

    (s,) = declare.declared()
    _, problems = s.check()
    assert (
        len(problems) == 1
        and "schedule 'a': job: names 'b' but is the schedule of @fleet.job('a')" in problems[0]
    )


def test_gather_reports_a_name_declared_twice_with_both_places(tmp_path: Path) -> None:
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    one.write_text('[[schedule]]\nname = "d"\nevery = "1m"\njob = "j"\n')
    two.write_text(
        '[[schedule]]\nname = "d"\nevery = "2m"\njob = "j"\n'
        '[[schedule]]\nname = "e"\nevery = "1m"\njob = "j"\n'
    )
    with pytest.raises(ScheduleFileError) as across_files:
        declare.gather([one, two], [])
    assert across_files.value.problems == [f"schedule 'd': name: declared twice, at {one} and at {two}"]

    a = fleet.Every("1m", name="e", job="j")
    b = fleet.Every("1m", name="f", job="j")
    c = fleet.Every("2m", name="f", job="j")
    with pytest.raises(ScheduleFileError) as mixed:
        declare.gather([two], [a, b, c])
    assert mixed.value.problems == [
        f"schedule 'e': name: declared twice, at {two} and at {a.place}",
        f"schedule 'f': name: declared twice, at {b.place} and at {c.place}",
    ]
    assert [s.name for s in declare.gather([one], [a, b])] == ["d", "e", "f"]


def test_gather_prefixes_a_files_problems_with_its_path_when_it_is_not_alone(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[schedule]]\nname = "x"\nevery = "0s"\njob = "j"\n')
    with pytest.raises(ScheduleFileError) as alone:
        declare.gather([bad], [])
    assert alone.value.problems == ["schedule 'x': every: must be positive"]
    with pytest.raises(ScheduleFileError) as beside_code:
        declare.gather([bad], [fleet.Every("1m", name="y", job="j")])
    assert beside_code.value.problems == [f"{bad}: schedule 'x': every: must be positive"]


def test_json_equality_tells_true_from_1() -> None:
    assert _same_json({"a": [1, 2.0, "x"]}, {"a": [1.0, 2, "x"]})
    assert not _same_json({"a": True}, {"a": 1})
    assert not _same_json({"a": 1}, {"a": "1"})
    assert not _same_json({"a": 1}, {"a": 1, "b": None})


def test_no_worker_verdict_names_the_job() -> None:
    assert verdict_text("NO-WORKER", "nc.tik", job_served=False) == "NO-WORKER (job nc.tik)"
    assert verdict_text("NO-WORKER", "nc.tik", job_served=True) == "NO-WORKER"
    assert verdict_text("LATE", "nc.tik", job_served=False) == "LATE"


def test_apply_prints_counts_and_names_up_to_a_screenful(capsys: pytest.CaptureFixture[str]) -> None:
    r = ApplyResult(created=[f"s{i:05d}" for i in range(20_000)], unchanged=["u"], disabled=["gone"])
    apply_report.print_result(r, 20_001, "big.toml")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "created: " + ", ".join(f"s{i:05d}" for i in range(20)) + " ... and 19,980 more"
    assert lines[1] == "disabled: gone"
    assert lines[2] == (
        "created 20,000, updated 0, replanned 0, unchanged 1, disabled 1: "
        "applied 20,001 schedule(s) from big.toml"
    )
    assert len(lines) == 3


def test_a_schedule_that_is_not_a_schedule_is_refused_when_declared() -> None:
    with pytest.raises(TypeError, match=r"@fleet.job\('x'\): schedule must be a fleet.Cron, .* not str"):
        fleet.job("x", schedule="0 2 * * *")  # type: ignore[arg-type]
