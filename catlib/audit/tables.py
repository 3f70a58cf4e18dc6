"""The audit's tables: a text or Markdown table of one model's findings, several models side
by side, the findings' details, the ablation, and a JSON document."""
from __future__ import annotations

import json

from ..common.formatting import md_table, number
from .findings import DEFECTS, Finding


def cell(finding: Finding) -> str:
    """A table cell for one finding: "**yes** value" where the model shows the defect, else
    "no value" (a non-breaking space keeps the two together)."""
    return f"{'**yes**' if finding.shows else 'no'}\u00a0{format_value(finding.value)}"


def format_ablation(rows: list[dict]) -> str:
    """The ablation as a Markdown table: correction, #, measured as, published, this
    correction alone, causal variant."""
    return md_table(("correction", "#", "measured as", "published", "this correction alone",
                     "causal variant"),
                    [(f"`{r['field']}`", r["defect"] or "—", r["published"].unit, cell(r["published"]),
                      cell(r["alone"]), cell(r["causal"])) for r in rows], "lrlrrr")


def format_value(value: float) -> str:
    """A finding's value for a table: 3 significant digits, "—" for NaN."""
    return "—" if value != value else number(value)


def format_audit(findings: list[Finding], markdown: bool = False) -> str:
    """The findings as a text table (or a Markdown table): #, defect, shows, value, measured
    as; the text table puts each finding's detail on a second line."""
    header = ("#", "defect", "shows", "value", "measured as")
    rows = [(str(f.defect), f.name, "yes" if f.shows else "no", format_value(f.value), f.unit)
            for f in findings]
    if markdown:
        return md_table(header, rows, "rlcrl")
    w = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    indent = " " * (sum(w) + 8)
    lines = []
    for r, f in zip([header, *rows], [None, *findings]):
        lines.append(f"{r[0]:>{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:>{w[3]}}  {r[4]}")
        if f is not None and f.detail:
            lines.append(f"{indent}({f.detail})")
    return "\n".join(lines)


def details_table(audits: dict[str, list[Finding]]) -> str:
    """A Markdown table of the findings' details (what each number means for each model):
    #, defect, one column per model."""
    by_defect = [{f.defect: f for f in audits[n]} for n in audits]
    numbers = sorted(set().union(*by_defect))
    rows = [(d, DEFECTS[d], *(found[d].detail if d in found else "" for found in by_defect))
            for d in numbers]
    return md_table(("#", "defect", *audits), rows, "rl" + "l" * len(audits))


def compare_audits(audits: dict[str, list[Finding]]) -> str:
    """A Markdown table of several models' audits side by side: #, defect, one column per
    model ("**yes** value" where the model shows the defect), measured as."""
    names = list(audits)
    by_defect = [{f.defect: f for f in audits[n]} for n in names]
    numbers = sorted(set().union(*by_defect))
    rows = []
    for d in numbers:
        cells = [cell(found[d]) if d in found else "" for found in by_defect]
        unit = next(found[d].unit for found in by_defect if d in found)
        rows.append((d, DEFECTS[d], *cells, unit))
    return md_table(("#", "defect", *names, "measured as"), rows, "rl" + "r" * len(names) + "l")


def audit_to_json(findings: list[Finding], **meta) -> str:
    """``{**meta, "findings": [...]}`` as JSON text (NaN as null)."""
    return json.dumps({**meta, "findings": [f.to_dict() for f in findings]}, indent=1,
                      ensure_ascii=False, allow_nan=False)

