"""The commands reference, rendered from the argument parsers of fleetctl, fleet-ticker and
fleet-worker, so that the page says what the code accepts.

The page is committed as generated: its hand-written introduction, the marker line, then the
rendered sections. `python docs/hooks/cli_reference.py --write` regenerates it (`--check` exits 1
when it is not current; without either it prints the page). As an MkDocs hook it refuses to build
a site from a page that is not current, and a test checks the same.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- generated below from the argument parsers: python docs/hooks/cli_reference.py --write -->"
PAGE = "reference/commands.md"
PATH = Path(__file__).resolve().parents[1] / PAGE
REGENERATE = "python docs/hooks/cli_reference.py --write"
WIDTH = 100


def _wide(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser and its subparsers with usage lines wrapped at WIDTH, whatever the terminal."""
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    for sub in _subparsers(parser).values():
        _wide(sub)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _flag(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs == 0:
            return f"`{names}`"
        metavar = action.metavar or action.dest.upper()
        return f"`{names} {metavar}`"
    return f"`{action.metavar or action.dest}`"


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:  # argparse's own expansion: %(default)s, %(prog)s, %%
        text = text % {**vars(action), "prog": prog}
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of: {', '.join(map(str, action.choices))})"
    return _cell(text)


def render_parser(title: str, parser: argparse.ArgumentParser, level: int = 2) -> list[str]:
    """One section: the usage line, the description and a table of the arguments."""
    out = [f"{'#' * level} `{title}`", ""]
    if parser.description:
        out += [_cell(parser.description), ""]
    out += ["```", parser.format_usage().strip().removeprefix("usage: "), "```", ""]
    actions = [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        and a.help != argparse.SUPPRESS
    ]
    if actions:
        out += ["| argument | meaning |", "|---|---|"]
        out += [f"| {_flag(a)} | {_help(a, parser.prog)} |" for a in actions]
        out.append("")
    return out


def render() -> str:
    """The Markdown of every command and subcommand."""
    from fleet.ops.cli import parser as fleetctl_parser
    from fleet.process.settings import ticker_parser, worker_parser

    fleetctl, _ = fleetctl_parser()
    _wide(fleetctl)
    out = render_parser("fleetctl", fleetctl)
    subs = _subparsers(fleetctl)
    out += ["Commands:", ""]
    for action in fleetctl._actions:
        if isinstance(action, argparse._SubParsersAction):
            for c in action._choices_actions:
                out.append(f"- [`{c.dest}`](#fleetctl-{c.dest}): {_cell(c.help or '')}")
    out.append("")
    for name, sub in subs.items():
        out += render_parser(f"fleetctl {name}", sub, level=3)
    out += render_parser("fleet-ticker", _wide(ticker_parser()))
    out += render_parser("fleet-worker", _wide(worker_parser()))
    return "\n".join(out)


def regenerated(current: str) -> str:
    """The page `current` with its generated part (everything after the marker line) rendered anew."""
    if current.count(MARKER) != 1:
        raise ValueError(f"{PAGE}: the marker line must be there once: {MARKER}")
    head = current[: current.index(MARKER) + len(MARKER)]
    return f"{head}\n\n{render().rstrip()}\n"


def stale(current: str) -> str | None:
    """Why the page text `current` is not what the code generates, or None when it is current."""
    if current == regenerated(current):
        return None
    return f"docs/{PAGE} is not current with the argument parsers; regenerate it: {REGENERATE}"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs hook: the commands page must be current (a help text changed without regenerating it
    would otherwise be published as it was)."""
    if page.file.src_uri == PAGE and (why := stale(markdown)):
        raise ValueError(why)
    return markdown


def main(argv: list[str]) -> int:
    current = PATH.read_text(encoding="utf-8")
    if argv == ["--write"]:
        PATH.write_text(regenerated(current), encoding="utf-8")
        return 0
    if argv == ["--check"]:
        why = stale(current)
        if why:
            print(why, file=sys.stderr)
        return 1 if why else 0
    if argv:
        print("usage: python docs/hooks/cli_reference.py [--write | --check]", file=sys.stderr)
        return 2
    print(regenerated(current), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
