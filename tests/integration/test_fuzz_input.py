"""Property-based fuzzing of every input path an operator types: schedules files for `fleetctl apply`
and the flags of fleetctl, fleet-ticker and fleet-worker. Whatever comes in, the answer is exit 0 or a
refusal (exit 2, one line per problem), never a traceback; and a refused apply changes nothing."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.errors import ConfigError
from fleet.ops.cli import main as fleetctl
from fleet.process.settings import ticker_settings, worker_settings
from tests.support import apply_text

EXAMPLES = 1000
_files = itertools.count()

# -- schedules files -------------------------------------------------------------------------------

NASTY_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "",
            "a\n",
            "x" * 300,
            "a\x00b",
            "\x1b]0;pwned\x07",
            "ok-name",
            "nightly.report",
            "*/61 * * * *",
            "5-5/15 * * * *",
            "L/2 * * * *",
            "0 0 30 2 *",
            "0\u00a0*\u00a0*\u00a0*\u00a0*",
        ]
    ),
)
DURATIONS = st.one_of(
    st.sampled_from(
        ["1us", "1ms", "500ms", "1s", "5m", "1h30m", "2d", "999999999d", "1e20s", "-5s", "0", "", "7"]
    ),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    NASTY_TEXT,
)
DATES = st.one_of(
    st.sampled_from(
        [
            "0001-01-01T00:00:00+05:00",
            "9999-12-31T23:59:59-05:00",
            "2026-11-01T00:00:00Z",
            "1900-01-01T00:00:00",
            "2026-02-30T00:00:00Z",
            "not a date",
        ]
    ),
    st.datetimes().map(lambda d: d.isoformat()),
    NASTY_TEXT,
)
JSONISH: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), NASTY_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NASTY_TEXT, inner, max_size=3)),
    max_leaves=8,
)
FIELDS = {
    "name": NASTY_TEXT,
    "every": DURATIONS,
    "cron": NASTY_TEXT,
    "timezone": st.one_of(
        st.sampled_from(["UTC", "Europe/Berlin", "Mars/Olympus", "", "../../etc/passwd"]), NASTY_TEXT
    ),
    "job": NASTY_TEXT,
    "args": JSONISH,
    "start_at": DATES,
    "catchup": st.sampled_from(["skip", "latest", "all", "sometimes", ""]),
    "max_lateness": DURATIONS,
    "overlap": st.sampled_from(["allow", "skip", "queue", "never"]),
    "timeout": DURATIONS,
    "retry": st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "max_attempts": st.one_of(st.integers(min_value=-5, max_value=10**12), NASTY_TEXT),
                "base": DURATIONS,
                "cap": DURATIONS,
            },
        ),
        NASTY_TEXT,
    ),
}


def toml_value(value: Any) -> str:
    """`value` written as TOML (inline), or a deliberately broken token for what TOML cannot hold."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in value)
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


# A valid schedule, some of whose fields are then replaced by anything.
SCHEDULE = st.builds(
    lambda name, fields: {"name": name, "job": "noop", "every": "5m", **fields},
    st.sampled_from(["fz-a", "fz-b"]),
    st.fixed_dictionaries({}, optional=FIELDS),
)


@st.composite
def schedule_files(draw: st.DrawFn) -> bytes:
    entries = draw(st.lists(SCHEDULE, max_size=3))
    text = "".join(
        "[[schedule]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in e.items()) for e in entries
    ).encode()
    mangle = draw(st.sampled_from(["none", "none", "none", "latin1", "truncate", "garbage"]))
    if mangle == "latin1":
        text += b"\n# caf\xe9\n"
    elif mangle == "truncate" and text:
        text = text[: draw(st.integers(min_value=0, max_value=len(text)))]
    elif mangle == "garbage":
        text += draw(st.binary(max_size=40))
    return text


def snapshot(conn: psycopg.Connection[Any]) -> str:
    rows = conn.execute("SELECT * FROM fleet.schedules ORDER BY name").fetchall()
    runs = conn.execute("SELECT count(*) AS n FROM fleet.job_runs").fetchone()
    return hashlib.sha256(repr((rows, runs)).encode()).hexdigest()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(content=schedule_files())
def test_apply_answers_0_or_2_and_a_refusal_changes_nothing(
    content: bytes,
    db_url: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / f"s{next(_files)}.toml"
    path.write_bytes(content)
    before = snapshot(conn)
    code = fleetctl(["--database-url", db_url, "apply", str(path)])
    out = capsys.readouterr()
    assert code in (0, 2), (code, out.err)
    assert "Traceback" not in out.err
    if code == 2:
        assert out.err.strip(), "a refusal says why"
        assert all(line.startswith("fleetctl apply: ") for line in out.err.strip().splitlines()), out.err
        assert snapshot(conn) == before


# -- flags -----------------------------------------------------------------------------------------

FLAG_VALUES = st.one_of(
    st.sampled_from(
        ["1e20", "-5", "0", "nan", "inf", "1", "10", "999999999d", "7", "1h", "", "../x", "x\x00"]
    ),
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.floats().map(str),
    st.text(max_size=12),
)
TICKER_FLAGS = ["--poll", "--batch", "--catchup-limit", "--id"]
WORKER_FLAGS = [
    "--lease",
    "--heartbeat",
    "--poll",
    "--concurrency",
    "--async-concurrency",
    "--claim-batch",
    "--grace",
    "--abandon-after",
    "--id",
]


@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=True)
@given(flag=st.sampled_from(TICKER_FLAGS + WORKER_FLAGS), value=FLAG_VALUES, env=st.booleans())
def test_process_flags_and_their_variables_are_taken_or_refused(flag: str, value: str, env: bool) -> None:
    """A flag (or its FLEET_* variable) is taken within its bounds or refused naming it (ConfigError;
    argparse's exit 2 for what is not even a number)."""
    worker = flag in WORKER_FLAGS and (flag not in TICKER_FLAGS or env)
    var = {"--lease": "FLEET_LEASE", "--heartbeat": "FLEET_HEARTBEAT", "--concurrency": "FLEET_CONCURRENCY",
           "--async-concurrency": "FLEET_ASYNC_CONCURRENCY", "--claim-batch": "FLEET_CLAIM_BATCH",
           "--grace": "FLEET_GRACE", "--abandon-after": "FLEET_ABANDON_AFTER"}.get(flag)  # fmt: skip
    base = ["--app", "fleet_test_jobs"] if worker else []
    argv, environ = ([*base], {var: value}) if env and var else ([*base, flag, value], {})
    try:
        s = worker_settings(argv, environ) if worker else ticker_settings(argv, environ)
    except ConfigError as e:
        assert str(e).startswith(flag) or (var and str(e).startswith(var)) or "--" in str(e), str(e)
        return
    except SystemExit as e:
        assert e.code == 2
        return
    for field in ("batch_size", "catchup_limit", "concurrency", "claim_batch", "async_concurrency"):
        n = getattr(s, field, 1)
        assert 1 <= n <= 100_000, (field, n)
    for field in ("poll_s", "lease_s", "heartbeat_s", "grace_s", "abandon_after_s"):
        x = getattr(s, field, 1.0)
        assert 0 <= x <= 7 * 86400, (field, x)


FLEETCTL = [
    ["runs", "fz", "--limit"],
    ["runs", "--all", "--limit"],
    ["dead", "--limit"],
    ["prune", "--older-than"],
    ["prune", "--older-than", "30d", "--batch"],
    ["prune", "--dry-run", "--older-than"],
    ["show", "fz"],
    ["trace", "fz"],
    ["retry", "fz"],
    ["trigger", "fz", "--args"],
    ["pause", "fz", "--note"],
    ["status"],
    ["backfill", "fz", "--to", "2026-01-01T00:00:00Z", "--from"],
    ["verify", "--schedule"],
    ["verify", "--since"],
    ["verify", "--until"],
    ["verify", "--since", "2026-01-01T00:00:00Z", "--until"],
    ["verify", "--limit"],
    ["verify", "--max-window"],
    ["verify", "--retention"],
]


@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(command=st.sampled_from(FLEETCTL), value=FLAG_VALUES)
def test_fleetctl_arguments_answer_without_a_traceback(
    command: list[str],
    value: str,
    db_url: str,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    apply_text(conn, '[[schedule]]\nname = "fz"\nevery = "15m"\njob = "noop"\n')
    try:
        code = fleetctl(["--database-url", db_url, *command, value])
    except SystemExit as e:  # argparse's own refusal
        code = e.code if isinstance(e.code, int) else 2
    out = capsys.readouterr()
    assert code in (0, 1, 2), (command, value, code, out.err)
    assert "Traceback" not in out.err and "Traceback" not in out.out
    if code == 2:
        assert len(out.err.strip().splitlines()) >= 1
