"""The premises section of docs/verdicts.md, written from the registry: what each premise means and how it is
checked (:data:`xpushare.model.premises.PREMISES`), and which premises each case declares (``CaseDef.requires``).

tests/lab/matrix.py writes it into docs/verdicts.md with the matrix; a unit test keeps the document equal to it.
"""

from __future__ import annotations

from collections.abc import Iterable

from xpushare.cases.base import REGISTRY, CaseDef
from xpushare.model.premises import PREMISES

__all__ = ["case_premises", "premises_markdown"]

_ORDER = ("FUNC", "COMBO", "PERF", "MET", "ISO", "STAB", "LEAK", "FAIL")


def case_premises(case: CaseDef) -> list[str]:
    """The premises ``case`` declares, in :data:`PREMISES` order (as they are listed and checked)."""
    return [name for name in PREMISES if name in case.requires]


def _order(case_id: str) -> tuple[int, int]:
    head, _, num = case_id.partition("-")
    return (_ORDER.index(head) if head in _ORDER else len(_ORDER)), int(num) if num.isdigit() else 0


def _span(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else f"{ids[0]}..{ids[-1].partition('-')[2]}"


def _groups(cases: Iterable[CaseDef]) -> list[tuple[list[str], list[str]]]:
    """Runs of consecutive cases (matrix order, one prefix) that declare the same premises."""
    out: list[tuple[list[str], list[str]]] = []
    for case in sorted(cases, key=lambda c: _order(c.case_id)):
        names = case_premises(case)
        prefix = case.case_id.partition("-")[0]
        if out and out[-1][1] == names and out[-1][0][-1].partition("-")[0] == prefix:
            out[-1][0].append(case.case_id)
        else:
            out.append(([case.case_id], names))
    return out


def premises_markdown() -> str:
    """The ``## Premises`` section (Markdown, ending in a newline)."""
    lines = ["## Premises", "",
             "Every case declares what must hold for its verdict to mean anything (`invoke cases` lists them;",
             "the dry run marks with `!` those the inventory already shows unmet). A premise unmet before the act",
             "makes the case SKIP, `premise unmet: <name>: <why>`, before any pod runs; one found unmet in the",
             "evidence makes the verdict ERROR with the same words. Neither is ever a PASS, and neither is a FAIL",
             "of the SUT.", "",
             "| premise | what must hold | checked | how |", "|---|---|---|---|"]
    lines += [f"| `{p.name}` | {p.description} | {', '.join(p.checked)} | {p.how} |" for p in PREMISES.values()]
    lines += ["", "| cases | premises |", "|---|---|"]
    lines += [f"| {_span(ids)} | {', '.join(f'`{n}`' for n in names) or '-'} |"
              for ids, names in _groups(REGISTRY.values())]
    return "\n".join(lines) + "\n"
