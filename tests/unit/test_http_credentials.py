"""The dashboard and the metrics endpoint take credentials by one rule: a bearer token of at least
16 characters, basic auth as USER:PASSWORD with neither part empty; anything else exits 2 naming
the variable, and a request passes only with exactly what was configured."""

from __future__ import annotations

import base64

import pytest

from fleet.ops.cli import main
from fleet.ops.httpd import MIN_TOKEN_CHARS, Credentials

COMMANDS = [
    (["metrics", "--listen", "127.0.0.1:0"], "FLEET_METRICS_TOKEN", "FLEET_METRICS_BASIC_AUTH"),
    (["dashboard", "--listen", "127.0.0.1:0"], "FLEET_DASHBOARD_TOKEN", "FLEET_DASHBOARD_BASIC_AUTH"),
]
WEAK = [
    ("token", "a", "at least 16 characters"),
    ("token", "x" * (MIN_TOKEN_CHARS - 1), "at least 16 characters"),
    ("basic", "prom:", "expected USER:PASSWORD"),
    ("basic", ":s3cret", "expected USER:PASSWORD"),
    ("basic", "prom", "expected USER:PASSWORD"),
]


@pytest.mark.parametrize(("argv", "token_var", "basic_var"), COMMANDS)
@pytest.mark.parametrize(("kind", "value", "message"), WEAK)
def test_weak_credentials_exit_2_naming_the_variable(
    argv: list[str],
    token_var: str,
    basic_var: str,
    kind: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for var in (token_var, basic_var):
        monkeypatch.delenv(var, raising=False)
    var = token_var if kind == "token" else basic_var
    monkeypatch.setenv(var, value)
    assert main(["--database-url", "postgresql://nowhere.invalid/x", *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"{var}: {message}" in err[0], err


def basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_a_request_passes_with_exactly_the_configured_credentials() -> None:
    assert Credentials().allows(None)  # none configured: open
    c = Credentials(token="t" * 16, basic=("prom", "s3cret"))
    assert c.allows("Bearer " + "t" * 16) and c.allows("bearer " + "t" * 16)
    assert c.allows(basic("prom:s3cret"))
    for header in (None, "", "Bearer " + "t" * 15, "Bearer", basic("prom:s3cre"), basic("prom:"), "Basic !!"):
        assert not c.allows(header), header
    assert not Credentials(basic=("prom", "s3cret")).allows("Bearer " + "t" * 16)
