"""Importing the application modules that register jobs (`--app`), with an error that names the module."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from fleet.errors import ConfigError


class AppImportError(ConfigError):
    """An application module given with --app cannot be imported; the message names it and the error.
    The original exception is its `__cause__` (its traceback is shown under --debug)."""


def import_apps(modules: Sequence[str]) -> None:
    """Import `modules` in order. Any failure (a missing module, a SyntaxError, an exception at
    import, a job registered twice) is an AppImportError naming the module."""
    for module in modules:
        _import(module)


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            raise AppImportError(
                f"--app: no module named {module!r} (looked in the current directory and on PYTHONPATH)"
            ) from e
        raise AppImportError(f"--app: cannot import {module!r}: {_say(e)}") from e
    except Exception as e:
        raise AppImportError(f"--app: cannot import {module!r}: {_say(e)}") from e


def _say(e: BaseException) -> str:
    """The error on one line: its type and message (a SyntaxError with its file and line)."""
    if isinstance(e, SyntaxError):
        where = f"{e.filename}, line {e.lineno}" if e.filename else f"line {e.lineno}"
        return f"{type(e).__name__}: {e.msg} ({where})"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
