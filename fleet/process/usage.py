"""The command-line parser of fleet's programs: a bad command line is refused in one line."""

from __future__ import annotations

import argparse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """Refuses a bad command line in one line naming the argument (exit 2), like every other bad
    input; `--help` has the usage. Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")
