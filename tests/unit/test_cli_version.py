"""`fleetctl --version` prints the installed distribution's version and exits 0."""

from __future__ import annotations

import importlib.metadata

import pytest

from fleet.ops.cli import main


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"fleetctl {importlib.metadata.version('fleet')}"
