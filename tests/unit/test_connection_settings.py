"""Database URLs: refused at start when libpq cannot read them, would read them otherwise than
written or would refuse a setting when it connects (exit 2, password hidden), and the network
defaults (timeouts, keepalives) yield to what a URL sets itself."""

from __future__ import annotations

import pytest

from fleet.errors import ConfigError
from fleet.ops.cli import main as fleetctl
from fleet.store.db import connect_kwargs, url_params
from fleet.ticker.cli import main as ticker
from fleet.worker.cli import main as worker

BAD = [
    ("host=x port", 'missing "=" after … in connection info string'),
    ("host=x s3cret", 'missing "=" after …'),
    ('host=x s3"cr"et', 'missing "=" after …'),
    ('host=x s3"]"cr"et', 'missing "=" after …'),
    ("postgresql://u:s3cret@[::1/db", 'matching "]" in IPv6 host address in URI: …'),
    ("postgresql://u:s3cret@localhost/db?bogus=1", 'invalid URI query parameter: "bogus"'),
    ("host=x nosuchoption=1", 'invalid connection option "nosuchoption"'),
]


@pytest.mark.parametrize(("url", "reason"), BAD)
def test_an_unreadable_url_is_refused_naming_the_flag_without_its_password(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as e:
        url_params(url, "--database-url")
    assert str(e.value).startswith("--database-url: ") and reason in str(e.value)
    assert "s3" not in str(e.value) and "cr" not in str(e.value)


RUN = {
    "fleetctl": lambda u: fleetctl(["--database-url", u, "status"]),
    "fleet-worker": lambda u: worker(["--app", "fleet_test_jobs", "--database-url", u]),
    "fleet-ticker": lambda u: ticker(["--database-url", u]),
}


@pytest.mark.parametrize("command", RUN)
def test_every_executable_exits_2_with_one_line_on_an_unreadable_url(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLEET_DATABASE_URL", raising=False)
    code = RUN[command]("postgresql://u:s3cret@[::1/db")
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "s3cret" not in err, (code, err)


# Read by libpq, but not as written: a / or @ of the password not percent-encoded puts part of it
# in the host, the port or the database name, which messages and logs show; or a value libpq
# refuses only when it connects. Each is refused at start, naming the setting, without the value.
MISREAD = [
    ("postgresql://app:s3/cr@db.example/shop", "an @ after the host's /: write a / "),
    ("postgresql://app:s3@cr@127.0.0.1/shop", "more than one @ before the host: write an @ "),
    ("postgresql://app:s3cr/shop", "port: must be a number from 1 to 65535 (write a / of a password"),
    ("host=db.example port=s3cr", "port: must be a number from 1 to 65535"),
    ("postgresql://db.example:99999/shop", "port: must be a number from 1 to 65535"),
    ("postgresql://h1:5432,h2:s3cr/shop", "port: must be a number"),
    ("postgresql://db.example/shop?sslmode=s3cr", "sslmode: must be one of disable, allow, prefer"),
    ("postgresql://db.example/shop?connect_timeout=s3cr", "connect_timeout: must be a whole number"),
    ("host=db.example target_session_attrs=s3cr", "target_session_attrs: must be one of any, "),
]


@pytest.mark.parametrize(("url", "reason"), MISREAD)
def test_a_url_libpq_would_misread_or_refuse_later_is_refused_at_start(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as e:
        url_params(url, "FLEET_DATABASE_URL")
    assert str(e.value).startswith(f"FLEET_DATABASE_URL: {reason}"), str(e.value)
    assert "s3" not in str(e.value) and "cr" not in str(e.value)


@pytest.mark.parametrize("command", RUN)
def test_every_executable_exits_2_on_a_misread_url_without_its_password(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLEET_DATABASE_URL", raising=False)
    code = RUN[command]("postgresql://app:s3/cr@127.0.0.1/shop")
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "s3" not in err, (code, err)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:p%40s%2Fw@h1:5432,h2:5433/shop?sslmode=require&connect_timeout=5",
        "postgresql://app:pa?ss@db.example/shop",  # an unencoded ? is read as part of the password
        "postgresql://db.example/shop?application_name=a@b",
        "postgresql://[::1]:5432/shop",
        "postgresql://app@/shop?host=/run/postgresql",
        "host=/run/postgresql dbname=shop keepalives=0 target_session_attrs=read-write",
    ],
)
def test_urls_as_libpq_reads_them_are_accepted(url: str) -> None:
    assert url_params(url, "FLEET_DATABASE_URL")


def test_network_defaults_apply_unless_the_url_sets_them() -> None:
    plain = connect_kwargs("postgresql://localhost/db", "fleet-worker w")
    assert plain["tcp_user_timeout"] == 10_000 and plain["keepalives_idle"] == 10
    assert plain["connect_timeout"] == 5 and plain["autocommit"] is True
    own = connect_kwargs(
        "postgresql://localhost/db?tcp_user_timeout=1500&connect_timeout=2", "fleet-worker w"
    )
    assert "tcp_user_timeout" not in own and "connect_timeout" not in own
    assert own["keepalives_idle"] == 10
    assert "keepalives" not in connect_kwargs("host=localhost keepalives=0", "x")


@pytest.mark.parametrize("command", RUN)
@pytest.mark.parametrize("given", ["flag", "env"])
def test_a_url_that_is_not_postgresql_says_what_one_looks_like(
    command: str, given: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "mysql://app:s3cret@db.example:3306/shop"
    if given == "env":
        monkeypatch.setenv("FLEET_DATABASE_URL", url)
        code = ENV_RUN[command]()
    else:
        monkeypatch.delenv("FLEET_DATABASE_URL", raising=False)
        code = RUN[command](url)
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    field = "--database-url" if given == "flag" else "FLEET_DATABASE_URL"
    assert (
        code == 2 and line.startswith(f"{command}") and f": {field}: mysql:// is not a PostgreSQL URL" in line
    )
    assert "postgresql://USER:PASSWORD@HOST:PORT/DATABASE" in line and "s3cret" not in line


ENV_RUN = {
    "fleetctl": lambda: fleetctl(["status"]),
    "fleet-worker": lambda: worker(["--app", "fleet_test_jobs"]),
    "fleet-ticker": lambda: ticker([]),
}
