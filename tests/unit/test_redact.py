"""Connection strings are printed without their password, whatever form libpq accepts them in."""

from __future__ import annotations

import pytest

from fleet.errors import ConfigError
from fleet.store.db import redact, scrub, url_params

SECRET = "s3cr?t w0rd"


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://fleet:s3cr?tw0rd@db.example:5432/app",  # an unencoded ? in a URL password
        "postgresql://fleet:s3cr%3Ft%20w0rd@db.example:5432/app",
        "postgresql://fleet@db.example/app?password=s3cr%3Ft%20w0rd&sslmode=require",
        "host=db.example user=fleet password='s3cr?t w0rd' dbname=app",
        "host=db.example user=fleet password = 's3cr?t w0rd' dbname=app",  # blanks around =
        "host=db.example user=fleet password='s3cr?t\\ w0rd' dbname=app",
        "host=db.example user=fleet sslpassword='s3cr?t w0rd' dbname=app",
    ],
)
def test_the_password_never_appears(dsn: str) -> None:
    shown = redact(dsn)
    assert "s3cr" not in shown and "w0rd" not in shown, shown
    assert "db.example" in shown and "fleet@" in shown


def test_the_rest_is_kept_and_reads_back_the_same() -> None:
    shown = redact("postgresql://fleet:pw@db.example:6432/app?sslmode=require&connect_timeout=3")
    assert shown == "postgresql://fleet@db.example:6432/app?connect_timeout=3&sslmode=require"
    assert url_params(shown) == {
        "user": "fleet",
        "host": "db.example",
        "port": "6432",
        "dbname": "app",
        "sslmode": "require",
        "connect_timeout": "3",
    }


def test_socket_directories_and_several_hosts_stay_readable() -> None:
    assert redact("host=/var/run/postgresql dbname=app password=x") == (
        "postgresql:///app?host=%2Fvar%2Frun%2Fpostgresql"
    )
    shown = redact("postgresql://u:x@h1:5432,h2:5433/app")
    assert "x@" not in shown and url_params(shown)["host"] == "h1,h2"


def test_an_unreadable_string_is_not_shown_and_its_error_hides_the_fragment() -> None:
    bad = "mysql://root:hunter2@db/app"
    assert "hunter2" not in redact(bad)
    with pytest.raises(ConfigError) as e:
        url_params(bad, "FLEET_DATABASE_URL")
    assert "hunter2" not in str(e.value)
    assert str(e.value).startswith("FLEET_DATABASE_URL: ") and "not a PostgreSQL" in str(e.value)
    assert "postgresql://" in str(e.value)


def test_free_text_is_scrubbed_of_password_shapes() -> None:
    assert scrub("failed for postgresql://u:hunter2@h/db") == "failed for postgresql://u:***@h/db"
    assert "hunter2" not in scrub("bad: host=h password='hunter2 x' dbname=d")
