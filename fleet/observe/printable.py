"""Text that reaches an operator's terminal. What came from a handler, a file or the database is
printed with its control characters escaped, so none of it can move the cursor, clear the screen,
change colours or reorder what follows."""

from __future__ import annotations

from typing import Final

_NAMED: Final = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
# Bidirectional overrides and marks reorder the text shown after them.
_BIDI: Final = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_CONTROLS: Final = (*range(0x20), 0x7F, *range(0x80, 0xA0))
_ESCAPES: Final[dict[int, str]] = {
    **{c: _NAMED.get(c, f"\\x{c:02x}") for c in _CONTROLS},
    **{c: f"\\u{c:04x}" for c in _BIDI},
    # what str.splitlines() also breaks at
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def printable(text: str) -> str:
    """`text` on one line with every control character written as an escape (``\\x1b``, ``\\n``,
    ``\\u202e``); other characters, accented and wide ones included, are kept."""
    return text.translate(_ESCAPES)


def printable_lines(text: str) -> list[str]:
    """`text` cut at its line breaks, trailing blanks and empty edges dropped, each line escaped."""
    return [printable(line.rstrip()) for line in text.strip("\r\n").split("\n")] if text.strip() else []
