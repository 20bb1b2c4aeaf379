"""Database URLs: refused at start when libpq cannot read them (exit 2, password hidden), and the
network defaults (timeouts, keepalives) yield to what a URL sets itself."""

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
