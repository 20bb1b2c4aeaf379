"""A large schedules file is parsed a slice of [[schedule]] tables at a time: the specs, their order,
and every message are those of the whole file parsed at once."""

from __future__ import annotations

import tomllib

import pytest

from fleet.errors import ScheduleFileError
from fleet.timing import schedfile
from fleet.timing.schedfile import load


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedfile, "SLICE_TABLES", 2)


def tables(n: int, first: int = 0) -> str:
    return "".join(
        f'[[schedule]]\nname = "s{i}"\nevery = "{i + 1}m"\njob = "j"\n' for i in range(first, first + n)
    )


def whole(text: str) -> list[schedfile.ScheduleSpec]:
    """The specs as one parse of the whole text gives them (the slices' reference)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(schedfile, "SLICE_TABLES", 10**9)
        return load(text)


def test_the_slices_hold_the_files_tables_in_order_with_their_sub_tables() -> None:
    text = (
        "# schedules\n\n"
        + tables(3)
        + '[schedule.args]\nkey = "v"\n[schedule.retry]\nmax_attempts = 2\n'
        + "[[schedule]]  # with a comment\r\n"
        + 'name = "crlf"\r\nevery = "1h"\r\njob = "j"\r\n'
        + tables(4, first=3)
    )
    docs = list(schedfile._slices(text))
    assert len(docs) == 4 and [len(d["schedule"]) for d in docs] == [2, 2, 2, 2]
    specs = load(text)
    assert specs == whole(text)
    assert [s.name for s in specs] == ["s0", "s1", "s2", "crlf", "s3", "s4", "s5", "s6"]
    assert specs[2].args == {"key": "v"} and specs[2].max_attempts == 2


def test_a_header_line_inside_a_multi_line_string_is_not_a_cut() -> None:
    text = tables(3) + '[[schedule]]\nname = "m"\nevery = "1m"\njob = "j"\n[schedule.args]\nnote = """\n'
    text += '[[schedule]]\nname = "not-a-table"\n"""\n' + tables(3, first=3)
    with pytest.raises(schedfile._NotSliceable):
        list(schedfile._slices(text))
    specs = load(text)
    assert [s.name for s in specs] == ["s0", "s1", "s2", "m", "s3", "s4", "s5"]
    assert specs[3].args == {"note": '[[schedule]]\nname = "not-a-table"\n'}


def test_bad_toml_in_a_later_slice_is_reported_where_the_whole_file_has_it() -> None:
    text = tables(5) + 'name = "orphan\n'
    with pytest.raises(tomllib.TOMLDecodeError) as direct:
        tomllib.loads(text)
    with pytest.raises(ScheduleFileError) as e:
        load(text)
    assert e.value.problems == [f"file: not valid TOML: {direct.value}"]
    assert "line 21" in e.value.problems[0]


def test_a_top_level_table_after_the_schedules_is_reported_as_in_the_whole_file() -> None:
    text = tables(5) + "[extra]\nx = 1\n" + tables(1, first=5)
    with pytest.raises(ScheduleFileError) as e:
        load(text)
    assert e.value.problems[0].startswith("file: unknown top-level key(s) extra")


def test_problems_are_numbered_across_slices() -> None:
    text = tables(5) + '[[schedule]]\nname = "s1"\nevery = "1m"\njob = "j"\n[[schedule]]\njob = "j"\n'
    with pytest.raises(ScheduleFileError) as e:
        load(text)
    assert "schedule 's1': name: declared twice, at [[schedule]] #2 and #6" in e.value.problems
    assert any(p.startswith("schedule #7: name: required") for p in e.value.problems), e.value.problems
