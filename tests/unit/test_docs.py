"""The documentation holds together: every page under docs/ is in mkdocs.yml's nav and reachable from
the docs index, which the README links; the generated pages come from the code and the benchmark's
JSON. (`mkdocs build --strict`, run by CI, checks every link and anchor of the site itself.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from fleet.ops.cli import parser as fleetctl_parser
from fleet.process.settings import worker_parser
from loadtest.bench import docs as bench_docs
from loadtest.bench.report import Report

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# `- Title: path.md` or `- path.md` in the nav; a commented line (`# - ...`) is a page to come.
NAV_ENTRY = re.compile(r"^\s*-\s+(?:[^:#]+:\s+)?([\w./-]+\.md)\s*$")
LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)]*)?\)")


def pages() -> set[str]:
    return {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}


def nav() -> list[str]:
    found = []
    for line in (ROOT / "mkdocs.yml").read_text().splitlines():
        m = NAV_ENTRY.match(line)
        if m and not line.lstrip().startswith("#"):
            found.append(m.group(1))
    return found


def links(page: Path) -> set[Path]:
    """The Markdown files a page links to by relative path."""
    return {(page.parent / target).resolve() for target in LINK.findall(page.read_text())}


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    listed = nav()
    assert "index.md" in listed
    assert len(listed) == len(set(listed)), "a page is listed twice in mkdocs.yml"
    missing = sorted(pages() - set(listed))
    assert not missing, f"pages missing from mkdocs.yml's nav (add or uncomment them): {missing}"
    absent = sorted(set(listed) - pages())
    assert not absent, f"nav entries without a page: {absent}"


def test_the_readme_links_the_docs_index_and_each_link_leads_to_a_file() -> None:
    readme = ROOT / "README.md"
    targets = links(readme)
    assert (DOCS / "index.md").resolve() in targets
    broken = sorted(str(t.relative_to(ROOT)) for t in targets if not t.is_file())
    assert not broken, f"README links to missing files: {broken}"


def test_every_page_is_reachable_from_the_docs_index() -> None:
    seen: set[Path] = set()
    todo = [(DOCS / "index.md").resolve()]
    while todo:
        page = todo.pop()
        if page in seen or not page.is_file():
            continue
        seen.add(page)
        todo.extend(t for t in links(page) if t.is_relative_to(DOCS.resolve()))
    unreachable = sorted(p for p in pages() if (DOCS / p).resolve() not in seen)
    assert not unreachable, f"pages no link from docs/index.md leads to: {unreachable}"


def cli_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "hooks" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_commands_reference_renders_every_command_and_flag_of_the_code() -> None:
    hook = cli_reference()
    text = hook.render()
    _, commands = fleetctl_parser()
    for name in commands:
        assert f"## `fleetctl {name}`" in text, name
    for action in worker_parser()._actions:
        for flag in action.option_strings if action.dest != "help" else ():
            assert f"`{flag}" in text, flag
    page = (DOCS / hook.PAGE).read_text()
    assert page.count(hook.MARKER) == 1


def test_the_committed_commands_reference_is_current() -> None:
    """The page in the repository is the generated one: regenerating it gives the same text."""
    hook = cli_reference()
    page = (DOCS / hook.PAGE).read_text(encoding="utf-8")
    assert page == hook.regenerated(page), (
        f"docs/{hook.PAGE} is not current; regenerate it: {hook.REGENERATE}"
    )
    assert "## `fleet-worker`" in page and "### `fleetctl apply`" in page


def test_a_stale_commands_reference_fails_the_site_build_naming_the_command_to_regenerate() -> None:
    hook = cli_reference()
    page = (DOCS / hook.PAGE).read_text(encoding="utf-8")

    class File:
        src_uri = hook.PAGE

    class Page:
        file = File()

    assert hook.on_page_markdown(page, page=Page()) == page
    stale = page.replace(
        "| `--until-idle` | exit when nothing is claimable |", "| `--until-idle` | old text |"
    )
    assert stale != page
    with pytest.raises(ValueError, match="python docs/hooks/cli_reference.py --write"):
        hook.on_page_markdown(stale, page=Page())


def report_json(quick: bool) -> bytes:
    r = Report({"started": "2026-12-02T21:39:17+00:00", "quick": quick, "cpus": 2, "sections": ["drain"]})
    r.add("drain.fleet.w2", "drain: fleet, 2 workers", 13101.2, "runs/s", trials=[12000.0, 13101.2])
    r.add("lag.fleet.p99", "lag p99 | every second", 15.0, "ms", target="< 50", ok=lambda v: v < 50)
    r.add("ratio.x", "drain: fleet / pgbench", 0.48, "x", target=">= 0.5", ok=lambda v: v >= 0.5)
    r.note("drain: runs / (first start .. last finish)")
    return r.json()


def test_the_benchmark_page_is_the_json_rendered() -> None:
    import orjson

    text = bench_docs.render(orjson.loads(report_json(quick=True)), "bench.json")
    assert "one **quick** run" in text and "2026-12-02T21:39:17+00:00" in text
    assert "| drain: fleet, 2 workers | 13,101 | runs/s | 12,000 / 13,101 |  |  |" in text
    assert "| lag p99 \\| every second | 15.0 | ms |  | < 50 | meets |" in text
    assert "| drain: fleet / pgbench | 0.48 | x |  | >= 0.5 | **misses** |" in text
    assert "1 of 2 met; missed: drain: fleet / pgbench." in text
    assert "- drain: runs / (first start .. last finish)" in text
    full = bench_docs.render(orjson.loads(report_json(quick=False)), "bench.json")
    assert "one **full** run" in full and "smoke test" not in full


def test_the_committed_benchmark_page_is_generated_from_the_committed_json() -> None:
    import orjson

    runs = sorted((ROOT / bench_docs.SOURCE).glob("*.json"))
    assert runs, "no benchmark JSON committed"
    source = runs[-1].relative_to(ROOT).as_posix()
    expected = bench_docs.render(orjson.loads(runs[-1].read_bytes()), source)
    assert (DOCS / "explanation" / "performance-figures.md").read_text() == expected, (
        f"regenerate: python -m loadtest.bench.docs {source} > docs/explanation/performance-figures.md"
    )


def test_a_file_that_is_not_a_report_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bench.json"
    bad.write_text("[1, 2]")
    assert bench_docs.main([str(bad)]) == 2
    assert bench_docs.main([str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("loadtest.bench.docs: file: ") for line in err), err


def test_a_rerun_replaces_the_sections_it_measured_and_the_page_says_so() -> None:
    def fig(section: str, value: float) -> dict[str, object]:
        return {
            "key": f"{section}.x",
            "section": section,
            "label": f"{section} x",
            "value": value,
            "unit": "s",
        }

    first = {
        "meta": {"started": "T1", "sections": ["herd", "lag"], "quick": False},
        "figures": [fig("herd", 13.0), fig("lag", 5.0)],
        "notes": ["herd: how, first", "lag: how"],
    }
    again = {
        "meta": {"started": "T2", "sections": ["herd"], "seconds": 90.0},
        "figures": [fig("herd", 8.0)],
        "notes": ["herd: how, again"],
    }
    merged = bench_docs.merge(first, again)
    assert [(f["section"], f["value"]) for f in merged["figures"]] == [("lag", 5.0), ("herd", 8.0)]
    assert merged["notes"] == ["lag: how", "herd: how, again"]
    # a figure of another section measured again (the limit's runs between the drains) is replaced,
    # and a note said again is not said twice
    first["figures"] = [*first["figures"], fig("limit", 1.0)]
    first["notes"] = [*first["notes"], "limit: how"]
    again["figures"] = [*again["figures"], fig("limit", 2.0)]
    again["notes"] = [*again["notes"], "limit: how"]
    merged = bench_docs.merge(first, again)
    assert [(f["section"], f["value"]) for f in merged["figures"]] == [
        ("lag", 5.0),
        ("herd", 8.0),
        ("limit", 2.0),
    ]
    assert merged["notes"] == ["lag: how", "herd: how, again", "limit: how"]
    text = bench_docs.render(merged, "bench.json")
    assert "**Measured again**: herd, in a second run started T2 (90.0 s)" in text
    assert "| herd x | 8.00 |" in text and "13.0" not in text
    with pytest.raises(bench_docs.BenchFileError):
        bench_docs.merge(first, {"figures": []})


def test_the_tutorials_sample_output_lists_every_migration() -> None:
    # `fleetctl migrate` and `fleetctl up` print the migrations they applied: on a new database, all
    from fleet.store.migrate import migrations

    every = ", ".join(str(m.version) for m in migrations())
    shown = {
        "first-application.md": re.findall(
            r"^migrated: applied ([\d, ]+)$", (DOCS / "tutorial/first-application.md").read_text(), re.M
        ),
        "first-fleet.md": re.findall(
            r"schema migrated \(([\d, ]+)\)$", (DOCS / "tutorial/first-fleet.md").read_text(), re.M
        ),
    }
    assert shown == {"first-application.md": [every], "first-fleet.md": [every]}
