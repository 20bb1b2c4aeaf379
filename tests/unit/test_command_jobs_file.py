"""The worker's `--jobs` file of command jobs: every way it can be wrong is one line naming the
file or the job and field (ConfigError: the worker exits 2), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.process.command_jobs import load_command_jobs

BAD = {
    "not TOML": (b'[[job]\nname = "x"', "is not valid TOML"),
    "nested too deeply": (
        b'[[job]]\nname = "x"\nargv = ["true"]\nenv = { x = ' + b"[" * 5000 + b"]" * 5000 + b" }\n",
        "is not valid TOML: arrays or tables nested too deeply",
    ),
    "not UTF-8": (b'[[job]]\nname = "\xff"\nargv = ["true"]\n', "is not UTF-8 text (at byte offset 16)"),
    "job not an array": (b"job = 3\n", "job: must be an array of tables ([[job]])"),
    "a top-level typo": (b'[[jobs]]\nname = "x"\nargv = ["true"]\n', "unknown top-level key(s) jobs"),
    "unknown field": (b'[[job]]\nname = "x"\nargv = ["true"]\nargs = []\n', "job 'x': unknown field(s) args"),
    "empty argv": (b'[[job]]\nname = "x"\nargv = []\n', "job 'x': argv: must be a non-empty list of strings"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_jobs_file_is_one_line_naming_what_is_wrong(tmp_path: Path, case: str) -> None:
    content, expected = BAD[case]
    f = tmp_path / "jobs.toml"
    f.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_command_jobs(str(f))
    text = str(e.value)
    assert text.startswith("--jobs: ") and expected in text and "\n" not in text, text


def test_an_unreadable_jobs_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--jobs: cannot read .*missing\.toml"):
        load_command_jobs(str(tmp_path / "missing.toml"))


def test_a_good_jobs_file_gives_its_jobs(tmp_path: Path) -> None:
    f = tmp_path / "jobs.toml"
    f.write_text('[[job]]\nname = "file-ok"\nargv = ["true"]\npermanent_exit_codes = [3]\n')
    (job,) = load_command_jobs(str(f))
    assert (job.name, job.argv, job.permanent_exit_codes) == ("file-ok", ("true",), frozenset({3}))
