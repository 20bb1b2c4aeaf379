"""`fleetctl --version` prints the installed distribution's version and exits 0; a command line
imports the module of the command it names."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata

import pytest

from fleet.ops.cli import COMMAND_MODULE, COMMAND_MODULES, command_named, main, parser


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"fleetctl {importlib.metadata.version('fleet')}"


def test_each_command_is_found_in_the_module_that_adds_it() -> None:
    # a command line naming a command imports that command's module alone: the map must match
    for name in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        added = importlib.import_module(name).add_commands(sub)
        assert {c: COMMAND_MODULE[c] for c in added} == dict.fromkeys(added, name)
    _, every = parser()
    assert set(COMMAND_MODULE) | {"migrate", "apply"} == set(every)
    for command in every:
        _, some = parser(command)
        assert command in some


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["status", "--json"], "status"),
        (["--database-url", "postgresql://h/db", "runs", "x"], "runs"),
        (["--debug", "metrics"], "metrics"),
        (["--help"], None),
        ([], None),
    ],
)
def test_the_command_a_line_names(argv: list[str], command: str | None) -> None:
    assert command_named(argv) == command


def test_an_unknown_command_is_refused_with_every_command_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["nosuch"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nosuch'" in err and "'dashboard'" in err and "'status'" in err
