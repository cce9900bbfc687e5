"""One scraper: every scrape of the scheduler's exporter goes through ``xpushare/evidence/scrape_capture.py``
(docs/architecture.md "One scraper"), and ``prometheus_client`` is imported by the one exposition parser,
``xpushare/parsers/metrics.py``, alone.

A module outside the scraper must not build a scrape itself: write curl's ``-w`` trailer (``HTTP_CODE=``,
``%{http_code}``), an argv or a shell script that runs ``curl``, or an exporter URL by hand (an f-string that
starts with ``http://``). Documentation strings may name the format; only code counts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "xpushare"
SCRAPER = "xpushare.evidence.scrape_capture"
PARSER = "xpushare.parsers.metrics"  # the one module that imports prometheus_client

_PROM = "prometheus_client"
_TRAILER = ("HTTP_CODE=", "%{http_code}")
_SHELL_CURL = re.compile(r"(?:^|[\s;&|('\"])curl\s")


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are documentation: every bare string statement."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def scrape_uses(tree: ast.Module, *, parser: bool = False) -> list[str]:
    """How a module scrapes the exporter by itself: it imports ``prometheus_client`` (unless it is the ``parser``),
    writes curl's status trailer, an argv starting with ``"curl"``, a shell script running ``curl``, or an f-string
    URL starting with ``http://`` / ``https://``."""
    docs = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and not parser:
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name.split(".")[0] == _PROM]
        elif isinstance(node, ast.ImportFrom) and not parser and (node.module or "").split(".")[0] == _PROM:
            found.append(f"{node.lineno}: imports {node.module}")
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value == "curl":
            found.append(f"{node.lineno}: argv ['curl', ...]")
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and str(node.values[0].value).startswith(("http://", "https://")):
            found.append(f"{node.lineno}: URL f-string")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if any(t in node.value for t in _TRAILER):
                found.append(f"{node.lineno}: curl trailer")
            elif _SHELL_CURL.search(node.value) and ("-w" in node.value or "-o" in node.value):
                found.append(f"{node.lineno}: curl in a shell script")
    return found


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out.append((name.removesuffix(".__init__"), ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return out


def test_every_scrape_goes_through_the_scraper() -> None:
    found = {name: hits for name, tree in _modules()
             if name != SCRAPER and (hits := scrape_uses(tree, parser=name == PARSER))}
    assert not found, f"scrapes built outside {SCRAPER} (call the scraper instead): {found}"


def test_the_parser_is_prometheus_clients() -> None:
    parser = dict(_modules())[PARSER]
    assert any(isinstance(n, ast.ImportFrom) and n.module == "prometheus_client.parser" for n in ast.walk(parser))


def test_the_scraper_check_can_fail() -> None:
    tree = ast.parse(
        '"""A doc naming HTTP_CODE= and curl -w is fine."""\n'
        "from prometheus_client.parser import text_string_to_metric_families\n"
        "argv = ['curl', '-s', url]\n"
        "url = f'http://{ip}:{port}/metrics'\n"
        "w = '\\\\nHTTP_CODE=%{http_code}\\\\n'\n"
        "script = 'if [ -n \"$u\" ]; then curl -sS -o - \"$u\"; fi'\n"
        "words = ['host', 'curl']\nmsg = f'see http://{x}' if 0 else 'GET http://h:9402'\n")
    assert scrape_uses(tree) == ["2: imports prometheus_client.parser", "3: argv ['curl', ...]", "4: URL f-string",
                                 "5: curl trailer", "6: curl in a shell script"]
    assert scrape_uses(tree, parser=True)[0] == "3: argv ['curl', ...]"
