"""The README and the docs work from a fresh checkout: every relative link and quoted repository path exists, and
every quoted `kernelrl ...` command names a real subcommand."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelrl.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
RESULT_DOCS = sorted((ROOT / "benchmarks" / "results").rglob("*.md"))

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_SPAN = re.compile(r"`([^`\n]+)`")
# a path quoted from the repository root: a top-level folder, then no placeholder or wildcard
_REPO_PATH = re.compile(r"^(?:benchmarks|configs|docs|examples|src|suite|tests)/[\w./-]*$")
_COMMAND = re.compile(r"(?<![\w./-])kernelrl\s+([a-z][\w-]*)(?:\s+([a-z][\w-]*))?")


def relative_links(text: str) -> list[str]:
    """The link targets of a markdown text that point into the repository (no scheme, no bare anchor)."""
    targets = [m.group(1) for m in _LINK.finditer(text)]
    return [t.split("#", 1)[0] for t in targets if not re.match(r"^(?:[a-z][\w+.-]*:|#)", t)]


def code(text: str) -> list[str]:
    """The text of a markdown document's fenced blocks and inline code spans."""
    blocks = [m.group(0) for m in _FENCE.finditer(text)]
    return blocks + _SPAN.findall(_FENCE.sub("", text))


def quoted_paths(text: str) -> list[str]:
    """Inline code spans that are a path from the repository root."""
    return [s.rstrip(".") for s in _SPAN.findall(_FENCE.sub("", text)) if _REPO_PATH.match(s)]


def commands(text: str) -> set[tuple[str, ...]]:
    """(subcommand[, sub-subcommand]) of every `kernelrl ...` command line quoted in code."""
    found = set()
    for snippet in code(text):
        for m in _COMMAND.finditer(snippet):
            found.add(tuple(w for w in m.groups() if w))
    return found


def _docs(paths: list[Path]) -> list:
    return [pytest.param(p, id=str(p.relative_to(ROOT))) for p in paths]


def test_the_extractors_read_markdown_as_meant():
    text = ("See [the guide](docs/x.md#part), [a site](https://a.b), [here](#top) and ![plot](p.png).\n"
            "Run `kernelrl gemm show --shape 1x2x3` or `benchmarks/results/gemm_h200.csv.gz`; kernelrl makes code fast.\n"
            "```bash\nkernelrl eval REF CAND   # judge\npython -m kernelrl.gemm.build\n```\n")
    assert relative_links(text) == ["docs/x.md", "p.png"]
    assert quoted_paths(text) == ["benchmarks/results/gemm_h200.csv.gz"]
    assert commands(text) == {("gemm", "show"), ("eval",)}


@pytest.mark.parametrize("doc", _docs(DOCS + RESULT_DOCS))
def test_relative_links_point_to_files_that_exist(doc):
    missing = [t for t in relative_links(doc.read_text()) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("doc", _docs(DOCS))
def test_quoted_repository_paths_exist(doc):
    missing = [p for p in quoted_paths(doc.read_text()) if not (ROOT / p).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} quotes paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", _docs(RESULT_DOCS))
def test_result_files_the_results_cite_exist(doc):
    results = ROOT / "benchmarks" / "results"
    cited = [s.rstrip(".") for s in _SPAN.findall(doc.read_text()) if re.match(r"^(?:gemm_runs|gpu_tests_h200)/\S+$", s)]
    missing = [c for c in cited if not (results / c).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} cites result files that do not exist: {missing}"


def _command_words() -> list[tuple[str, ...]]:
    """Each quoted command, cut to the words that name commands (a command's own arguments dropped)."""
    root = typer.main.get_command(app)
    found = set()
    for doc in DOCS:
        for words in commands(doc.read_text()):
            sub = root.commands.get(words[0])
            found.add(words if hasattr(sub, "commands") and len(words) > 1 else words[:1])  # a group's subcommand
    return sorted(found)


def test_the_docs_quote_commands():
    assert ("gemm", "tune") in _command_words() and ("eval",) in _command_words()


@pytest.mark.parametrize("words", _command_words(), ids=" ".join)
def test_quoted_commands_name_real_subcommands(words):
    result = CliRunner().invoke(app, [*words, "--help"])
    assert result.exit_code == 0, f"`kernelrl {' '.join(words)} --help` failed: {result.output[-500:]}"


@pytest.mark.parametrize("path, most", [("docs/gemm.md", 150), ("benchmarks/results/gemm_h200_findings.md", 300)])
def test_the_gemm_reference_and_findings_stay_short_enough_to_read(path, most):
    assert len((ROOT / path).read_text().splitlines()) <= most
