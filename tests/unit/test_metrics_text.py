"""The metrics' text format, written by hand: escaping and numbers as Prometheus parses them."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from fleet.ops.metrics import _family, _label, _num


def test_label_values_and_help_are_escaped_and_parse_back() -> None:
    odd = 'a"b\\c\nd'
    text = b"".join(
        _family("fleet_x", "gauge", "help with \\ and\nnewline", f'fleet_x{{schedule="{_label(odd)}"}} 1.0\n')
    ).decode()
    (family,) = text_string_to_metric_families(text)
    assert family.documentation == "help with \\ and\nnewline"
    assert family.samples[0].labels == {"schedule": odd} and family.samples[0].value == 1.0
    assert _label("plain.name-1:x@y") == "plain.name-1:x@y"


def test_numbers_are_written_as_the_format_reads_them() -> None:
    assert [_num(v) for v in (0, 3, 1.5, 1796276160.0, 1e-7)] == [
        "0.0",
        "3.0",
        "1.5",
        "1796276160.0",
        "1e-07",
    ]
    assert [_num(v) for v in (math.inf, -math.inf)] == ["+Inf", "-Inf"] and _num(math.nan) == "NaN"
    for text in ("1e-07", "+Inf", "NaN", "1796276160.0"):
        (family,) = text_string_to_metric_families(f"# TYPE x gauge\nx {text}\n")
        value = family.samples[0].value
        assert math.isnan(value) if text == "NaN" else value == float(text)
