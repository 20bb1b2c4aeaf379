"""Worker and ticker flags: a bad value (or FLEET_* fallback) is refused with a message naming the
flag, before anything starts; durations are finite and at most a week."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fleet.errors import ConfigError
from fleet.process.settings import ticker_settings, worker_settings

APP = ["--app", "fleet_test_jobs"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--lease", "inf"], "--lease: must be at most"),
        (["--lease", "nan"], "--lease: must be positive"),
        (["--lease", "0"], "--lease: must be positive"),
        (["--heartbeat", "inf"], "--heartbeat: must be at most"),
        (["--lease", "10", "--heartbeat", "10"], "--heartbeat: must be shorter than the lease"),
        (["--poll", "inf"], "--poll: must be at most"),
        (["--poll", "1e9"], "--poll: must be at most"),
        (["--grace", "nan"], "--grace: must be zero or more"),
        (["--grace", "-1"], "--grace: must be zero or more"),
        (["--concurrency", "0"], "--concurrency: must be positive"),
        (["--concurrency", "100000"], "--concurrency: must be at most 1000"),
        (["--claim-batch", "-3"], "--claim-batch: must be positive"),
        (["--async-concurrency", "0"], "--async-concurrency: must be positive"),
        (["--async-concurrency", "10001"], "--async-concurrency: must be at most 10000"),
        (["--abandon-after", "0"], "--abandon-after: must be positive"),
        (["--abandon-after", "inf"], "--abandon-after: must be at most"),
    ],
)
def test_bad_worker_flags_are_refused_by_name(flags: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        worker_settings([*APP, *flags], {})


def test_the_environment_fallbacks_are_checked_alike() -> None:
    with pytest.raises(ConfigError, match="--lease: must be at most"):
        worker_settings(APP, {"FLEET_LEASE": "inf"})
    with pytest.raises(ConfigError, match="--poll: must be positive"):
        ticker_settings([], {"FLEET_TICKER_POLL": "nan"})


@pytest.mark.parametrize(
    ("flags", "environ", "named"),
    [
        (["--retention", "30m"], {}, "--retention: must be from 1h to 3660 days, or off"),
        (["--retention", "3661d"], {}, "--retention: must be from 1h to 3660 days, or off"),
        ([], {"FLEET_RETENTION": "never"}, "--retention: invalid duration"),
        (["--retention-every", "0"], {}, "--retention-every: must be positive"),
        ([], {"FLEET_RETENTION_EVERY": "inf"}, "--retention-every: must be at most"),
        (["--retention-batch", "0"], {}, "--retention-batch: must be positive"),
        (["--retention-batch", "100001"], {}, "--retention-batch: must be at most 100000"),
    ],
)
def test_bad_retention_settings_are_refused_by_name(
    flags: list[str], environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        ticker_settings(flags, environ)


def test_retention_has_a_default_an_off_and_env_fallbacks() -> None:
    s = ticker_settings([], {})
    assert (s.retention, s.retention_every_s, s.retention_batch) == (timedelta(days=30), 3600.0, 2000)
    assert ticker_settings(["--retention", "OFF"], {}).retention is None
    s = ticker_settings(
        [], {"FLEET_RETENTION": "1h", "FLEET_RETENTION_EVERY": "2.5", "FLEET_RETENTION_BATCH": "10"}
    )
    assert (s.retention, s.retention_every_s, s.retention_batch) == (timedelta(hours=1), 2.5, 10)
    assert ticker_settings(["--retention", "7d"], {"FLEET_RETENTION": "off"}).retention == timedelta(days=7)


def test_edges_that_are_allowed() -> None:
    s = worker_settings([*APP, "--grace", "0", "--lease", "604800", "--concurrency", "1000"], {})
    assert (s.grace_s, s.lease_s, s.concurrency, s.heartbeat_s) == (0.0, 604800.0, 1000, 604800.0 / 3)


def test_async_concurrency_and_abandon_after_have_defaults_and_env_fallbacks() -> None:
    s = worker_settings(APP, {})
    assert (s.async_concurrency, s.abandon_after_s) == (100, 30.0)
    s = worker_settings(APP, {"FLEET_ASYNC_CONCURRENCY": "5000", "FLEET_ABANDON_AFTER": "2.5"})
    assert (s.async_concurrency, s.abandon_after_s) == (5000, 2.5)


def test_the_ticker_lookahead_is_a_bounded_duration_that_may_be_zero() -> None:
    assert ticker_settings([], {}).lookahead_s == 60.0
    assert ticker_settings(["--lookahead", "0"], {}).lookahead_s == 0.0
    assert ticker_settings([], {"FLEET_LOOKAHEAD": "300"}).lookahead_s == 300.0
    assert ticker_settings(["--lookahead", "5"], {"FLEET_LOOKAHEAD": "300"}).lookahead_s == 5.0
    for bad, named in (
        ("-1", "zero or more"),
        ("nan", "zero or more"),
        ("inf", "at most"),
        ("1e9", "at most"),
    ):
        with pytest.raises(ConfigError, match=f"--lookahead: must be {named}"):
            ticker_settings(["--lookahead", bad], {})
    with pytest.raises(ConfigError, match="--lookahead: invalid value 'soon'"):
        ticker_settings([], {"FLEET_LOOKAHEAD": "soon"})


@pytest.mark.parametrize(
    ("settings", "flags", "line"),
    [
        (worker_settings, [*APP, "--bogus"], "fleet-worker: unrecognized arguments: --bogus (see --help)\n"),
        (
            worker_settings,
            [*APP, "--lease", "abc"],
            "fleet-worker: argument --lease: invalid float value: 'abc' (see --help)\n",
        ),
        (ticker_settings, ["--leader", "x"], "fleet-ticker: unrecognized arguments: x (see --help)\n"),
    ],
)
def test_a_bad_command_line_is_refused_in_one_line(
    settings: Any, flags: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        settings(flags, {})
    assert stopped.value.code == 2
    assert capsys.readouterr().err == line
