"""Cron expressions read with cron's meaning: each field's values, and the form cronsim evaluates.

cronsim evaluates expressions, but some of its readings differ from cron's: it reads a
single-value range with a step (``10-10/2``) as running to the end of the field. So fleet
parses every field itself (the grammar of Debian's crontab(5), plus ``L``, ``LW``, ``nL``, ``n#k``
and a leading seconds field) and hands cronsim only forms whose reading is unambiguous: ``*``,
``*/s``, single values, plain ranges, and the special day forms. Lenient forms cron does not
define are either given one documented meaning (``5/15``) or refused with the reason.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Final

__all__ = ["Cron", "CronError", "FIELDS", "parse"]


class CronError(ValueError):
    """A cron expression is not understood; ``str(e)`` says why, in one line."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int  # the largest value written; day of week goes to 7, another Sunday
    size: int  # how many distinct values the field has: the largest sensible step
    names: tuple[str, ...] = ()  # names for low, low + 1, ...


_MONTHS: Final = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

SECOND: Final = _Field("second", 0, 59, 60)
MINUTE: Final = _Field("minute", 0, 59, 60)
HOUR: Final = _Field("hour", 0, 23, 24)
DAY: Final = _Field("day-of-month", 1, 31, 31)
MONTH: Final = _Field("month", 1, 12, 12, _MONTHS)
WEEKDAY: Final = _Field("day-of-week", 0, 7, 7, _DAYS)
FIELDS: Final = (SECOND, MINUTE, HOUR, DAY, MONTH, WEEKDAY)

# Special day forms, kept as cronsim spells them: the last day, the last weekday (Monday to
# Friday) of the month, the last given weekday of the month, and the k-th given weekday.
LAST: Final = "L"
LAST_WEEKDAY: Final = "LW"

_NICKNAMES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Debian's crontab(5) separates fields by spaces and tabs.
_BLANKS: Final = " \t"


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the values of each field, and the six fields cronsim is given.

    ``days`` and ``weekdays`` hold numbers and the special forms (``"L"``, ``"LW"``, ``"5L"``,
    ``"1#2"``); weekday 7 is read as 0, Sunday.
    """

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int | str]
    months: frozenset[int]
    weekdays: frozenset[int | str]
    expr: str


def parse(text: str, *, strict: bool = True) -> Cron:
    """Parse `text`: 5 fields, or 6 with seconds first, or a nickname such as ``@daily``.

    Raises :class:`CronError` naming the field and the term at fault. ``strict=False`` also
    accepts the forms earlier versions of fleet stored without refusing them, with the meaning
    they had then: fields separated by any white space, steps larger than the field, and a step
    after ``L`` (ignored).
    """
    fields = _split(text, strict)
    if len(fields) == 1 and fields[0].startswith("@"):
        nickname = _NICKNAMES.get(fields[0].lower())
        if nickname is None:
            raise CronError("unknown nickname")
        fields = nickname.split()
    if len(fields) not in (5, 6):
        raise CronError(f"expected 5 fields, or 6 with seconds first, not {len(fields)}")
    if len(fields) == 5:
        fields = ["0", *fields]
    parsed = [_field(spec, value, strict) for spec, value in zip(FIELDS, fields, strict=True)]
    seconds, minutes, hours, days, months, weekdays = (values for values, _ in parsed)
    return Cron(
        seconds=_numbers(seconds),
        minutes=_numbers(minutes),
        hours=_numbers(hours),
        days=days,
        months=_numbers(months),
        weekdays=frozenset(0 if v == 7 else v for v in weekdays),
        expr=" ".join(form for _, form in parsed),
    )


def _split(text: str, strict: bool) -> list[str]:
    if not strict:
        return text.split()
    text = text.strip(_BLANKS + "\r\n")  # a line end around the whole expression is harmless
    for char in text:
        if char in _BLANKS or (char.isascii() and char.isprintable()):
            continue
        name = unicodedata.name(char, "")
        shown = f"U+{ord(char):04X}" + (f" {name}" if name else "")
        if char.isspace():
            raise CronError(f"white space {shown} between fields; separate them with spaces or tabs")
        raise CronError(f"unexpected character {shown}")
    # Only spaces and tabs are left as white space, so this splits on them alone.
    return text.split()


def _numbers(values: frozenset[int | str]) -> frozenset[int]:
    return frozenset(v for v in values if isinstance(v, int))


def _field(spec: _Field, text: str, strict: bool) -> tuple[frozenset[int | str], str]:
    """The values of one field and the field as cronsim is to read it."""
    values: set[int | str] = set()
    forms: list[str] = []
    for term in text.split(","):
        term_values, form = _term(spec, term, strict)
        values |= term_values
        forms.append(form)
    return frozenset(values), ",".join(forms)


def _term(spec: _Field, term: str, strict: bool) -> tuple[set[int | str], str]:
    where = f"{spec.name} field"
    if term == "":
        raise CronError(f"{where}: empty item in a list")
    body, slash, step_text = term.partition("/")
    step: int | None = None
    if slash:
        step = _step(spec, step_text, strict)
    special = _special(spec, body)
    if special is not None:
        # cronsim ignored a step after L and LW, so a stored expression keeps that reading.
        if step is not None and (strict or special not in (LAST, LAST_WEEKDAY)):
            raise CronError(f"{where}: a step cannot follow {body} ({term})")
        return {special}, special
    if body == "*":
        if step is None:
            return set(range(spec.low, spec.high + 1)), "*"
        # cronsim reads */s as every s-th value from the first, exactly as cron does.
        return set(range(spec.low, spec.high + 1, step)), f"*/{step}"
    start_text, dash, end_text = body.partition("-")
    start = _value(spec, start_text, term)
    if dash:
        end = _value(spec, end_text, term)
        if end < start:
            raise CronError(f"{where}: range {body} goes backwards; write it as two ranges")
    else:
        # A single value with a step runs to the end of the field: 5/15 is 5-59/15.
        end = start if step is None else spec.high
    values = range(start, end + 1, step or 1)
    if step is None or step == 1:
        return set(values), str(start) if start == end else f"{start}-{end}"
    # A stepped range is spelt out, so no library can read a-a/s or a/s otherwise.
    return set(values), ",".join(str(v) for v in values)


def _step(spec: _Field, text: str, strict: bool) -> int:
    where = f"{spec.name} field"
    if not text.isdigit() or not text.isascii():
        raise CronError(f"{where}: step {text!r} is not a whole number")
    step = int(text)
    if step == 0:
        raise CronError(f"{where}: a step must be at least 1, not 0")
    if strict and step > spec.size:
        raise CronError(
            f"{where}: step {step} is larger than the {spec.size} values of the field, so it would"
            f" fire only at the first (use `every` for an interval)"
        )
    return step


def _special(spec: _Field, body: str) -> str | None:
    """The special day form `body` is, or None when it is an ordinary term."""
    where = f"{spec.name} field"
    upper = body.upper()
    if spec is DAY:
        if upper in (LAST, LAST_WEEKDAY):
            return upper
        if upper.endswith("W"):
            raise CronError(f"{where}: W is supported only as LW, the last weekday of the month ({body})")
    elif spec is WEEKDAY:
        if upper == "L":
            raise CronError(f"{where}: L needs a weekday before it, e.g. 5L for the last Friday")
        if upper.endswith("L"):
            return f"{_value(spec, body[:-1], body) % 7}L"
        day, hash_sign, nth = body.partition("#")
        if hash_sign:
            if nth not in ("1", "2", "3", "4", "5"):
                raise CronError(f"{where}: the week in {body} must be 1 to 5")
            return f"{_value(spec, day, body) % 7}#{nth}"
    return None


def _value(spec: _Field, text: str, term: str) -> int:
    where = f"{spec.name} field"
    if text.upper() in spec.names:
        return spec.low + spec.names.index(text.upper())
    if not text.isdigit() or not text.isascii():
        if text == "?":
            raise CronError(f"{where}: ? is not cron; write *")
        shown = repr(text) if text == term else f"{text!r} in {term!r}"
        raise CronError(f"{where}: {shown} is not a value")
    value = int(text)
    if not spec.low <= value <= spec.high:
        raise CronError(f"{where}: {value} is out of range {spec.low}-{spec.high}")
    return value
