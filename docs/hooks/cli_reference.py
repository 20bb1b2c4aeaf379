"""The commands reference, rendered from the argument parsers of fleetctl, fleet-ticker and
fleet-worker, so that the page says what the code accepts.

As an MkDocs hook it replaces the `<!-- commands -->` marker of reference/commands.md at build time;
run as a script (`python docs/hooks/cli_reference.py`) it prints the same Markdown.
"""

from __future__ import annotations

import argparse
from typing import Any

MARKER = "<!-- commands -->"
PAGE = "reference/commands.md"
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
    from fleet.settings import ticker_parser, worker_parser

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


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs hook: fill in the commands page."""
    if page.file.src_uri == PAGE:
        if MARKER not in markdown:
            raise ValueError(f"{PAGE}: the {MARKER} marker is missing")
        return markdown.replace(MARKER, render())
    return markdown


if __name__ == "__main__":
    print(render())
