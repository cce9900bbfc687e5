"""Every document the code and the docs cite is in the repository, and every section of docs/sut/ they cite exists.

A citation is a name ending in ``.md`` (``docs/sut/metrics.md``, ``README-simgpu.md``, ``../samples/README.md``)
in a source or documentation file; a name with a ``/`` is resolved from the repository root or from the citing
file's folder, a bare name must be a file somewhere in the repository. A docs/sut/ citation may name sections
(``docs/sut/log.md §registration, §regex``): each must be a heading ``## §<name>`` of that page
(docs/sut/README.md says why the names are stable). Reports the tool writes (``run-report.md``, ``compare.md``) are not
citations; documents outside the repository (an interface reference, a design proposal kept elsewhere) are
never cited by name.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
#: Where citations are looked for, and in which kinds of file.
SCANNED = ("xpushare", "tests", "docs", "README.md", "tasks.py", "pyproject.toml", ".ci")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ""}
#: Files the tool writes into a run directory: names of outputs, not citations (each is checked to be written).
REPORTS = ("run-report.md", "soak-report.md", "fleet-report.md", "compare.md")
#: Names of documents that are not in the repository and must not come back.
GONE = ("sut-interfaces", "bash-harness-cases", "sut-on-cpu", "shared/reference", "landscape.md", "DESIGN.md")

CITATION = re.compile(r"(?<![\w.-])(?P<path>(?:\.\.?/)*(?:[\w.-]+/)*[\w-][\w.-]*\.md)\b"
                      r"(?P<sections>(?:(?:\s*[,/]\s*|\s+(?:and|to)\s+|\s+)§[a-z][\w-]*"
                      r"(?: items? \d+(?: and \d+)?)?)*)")
SECTION = re.compile(r"§([a-z][\w-]*)")
LEFTOVER = re.compile(r"docs/sut/[\w-]+\.md\s+§\d")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *SCANNED], cwd=ROOT, capture_output=True, check=True)
    files = [ROOT / name for name in out.stdout.decode().split("\0") if name]
    return [f for f in files if f.suffix in SUFFIXES and f.is_file() and not f.is_symlink()
            and "fixtures/samples" not in f.as_posix() and f != Path(__file__).resolve()
            and not _run_output(f)]


def _run_output(f: Path) -> bool:
    """A recorded output of a real run (docs/runs/<run>/*, not its README or script): what a command printed, with
    the names of that run's own files, not a citation."""
    rel = f.relative_to(ROOT).parts
    return rel[:2] == ("docs", "runs") and len(rel) > 3 and f.name != "README.md" and f.suffix != ".sh"


FILES = _tracked()
MD_FILES = sorted(p for p in ROOT.rglob("*.md") if ".git" not in p.parts and ".venv" not in p.parts)


def _resolve(path: str, citing: Path) -> Path | None:
    """The page ``path`` names from ``citing``: from the citing file's folder, then the repository root; a bare
    name that is in neither, the first page of that name anywhere in the repository."""
    for base in (citing.parent, ROOT):
        candidate = (base / path).resolve()
        if candidate.is_file():
            return candidate
    if "/" not in path:
        return next((p for p in MD_FILES if p.name == path), None)
    return None


def _headings(page: Path) -> set[str]:
    return set(re.findall(r"^#+ §([a-z][\w-]*)", page.read_text(encoding="utf-8"), flags=re.M))


def _citations(text: str) -> list[tuple[str, list[str]]]:
    return [(m["path"], SECTION.findall(m["sections"] or "")) for m in CITATION.finditer(text)]


def test_the_scan_sees_the_code_and_the_docs() -> None:
    names = {f.relative_to(ROOT).as_posix() for f in FILES}
    assert {"README.md", "docs/architecture.md", "xpushare/parsers/metrics.py", "docs/sut/README.md"} <= names
    assert len(FILES) > 200


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_cited_document_and_section_exists(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    missing = []
    for cited, sections in _citations(text):
        if Path(cited).name in REPORTS:
            continue
        page = _resolve(cited, path)
        if page is None:
            missing.append(cited)
            continue
        if page.is_relative_to(ROOT / "docs" / "sut"):
            missing += [f"{cited} §{s}" for s in sections if s not in _headings(page)]
    missing += [f"old section number: {m.group(0)}" for m in LEFTOVER.finditer(text)]
    missing += [f"document outside the repository: {name}" for name in GONE if name in text]
    assert missing == []


def test_report_names_are_outputs_of_the_tool() -> None:
    code = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "xpushare").rglob("*.py"))
    assert [name for name in REPORTS if f'"{name}"' not in code] == []


def test_a_missing_document_or_section_is_found() -> None:
    text = "see docs/sut/metrics.md §events, §no-such and docs/nowhere.md; docs/sut/log.md §4.2"
    assert _citations(text)[0] == ("docs/sut/metrics.md", ["events", "no-such"])
    page = _resolve("docs/sut/metrics.md", ROOT / "README.md")
    assert page is not None and "events" in _headings(page) and "no-such" not in _headings(page)
    assert _resolve("docs/nowhere.md", ROOT / "README.md") is None
    assert LEFTOVER.search(text)
