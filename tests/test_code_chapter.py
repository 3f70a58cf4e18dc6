"""Chapter 12, "A second corpus: source code": each generated text says what its artefact
implies (the synthetic study of tests/code_schema.py, whose every CE is a row's offset from
the Euler CAT), the chapter finds the complete artefact, else the partial one, else says
which commands make it, and the notebook runs in all three cases."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from catlib.book import code_context as cc
from catlib.book import code_goal as cg
from catlib.book import code_order as co
from catlib.book import code_split as csp
from catlib.book import code_study as cs
from catlib.book.code_artefact import load_code_study, planned_runs, status_text
from catlib.book.scale_readings import NAMES, split_oracle
from catlib.code_corpus import UNKNOWN, CodeFile, CodeVocab
from catlib.common.verdicts import prose_problems
from catlib.experiment.scale_plan import (ALIBI, ALIBI_DEEP, BUCKETS, CONTROL, EULER, EULER_DEEP,
                                          FOX, KERPLE_LOG, ORACLE_ALIBI, ORACLE_EULER, ROPE,
                                          study_rows)

from code_schema import code_study, study

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "12_code.ipynb"


def _found(artefact: dict, partial: bool | None = None) -> dict:
    """The artefact as :func:`load_code_study` returns it."""
    name = "scale_code_cpu.partial.json" if artefact.get("partial") else "scale_code_cpu.json"
    return {"study": split_oracle(artefact), "device": "cpu", "path": Path("results") / name,
            "partial": artefact.get("partial") if partial is None else partial}


def _rows(study_: dict, row: str) -> list[dict]:
    return [f for f in cs.against_euler(study_) if f["row"] == row]


# ------------------------------------------------------------------ the kernel question's words

def test_a_lead_of_003_over_the_bucket_bias_reads_ahead():
    s = split_oracle(code_study(offset={BUCKETS: 0.03}))
    for f in _rows(s, BUCKETS):
        assert 0.025 < f["lead"][0] < 0.035 and f["half"][0] < 0.015, f
        assert f["words"] == ["ahead", "ahead"], f
    table = cs.answer_table(s)
    line = next(ln for ln in table.splitlines() if ln.startswith("| bucket bias |"))
    assert re.search(r"\+0\.0[23]\d ± 0\.0\d\d \| ahead \|", line), line
    assert "it is ahead of the bucket bias, the KERPLE-log bias and the FoX gate." in cs.kernel_text(s)


def test_a_bias_level_with_the_kernel_reads_the_same_within_the_margin():
    s = split_oracle(code_study(offset={BUCKETS: 0.002}))
    assert all(f["words"] == ["the same within 0.02"] * 2 for f in _rows(s, BUCKETS))
    text = cs.kernel_text(s)
    assert "the same within 0.02 as the bucket bias" in text
    assert "a learned bias gains what the kernel gains" in text
    assert "ahead of the KERPLE-log bias and the FoX gate" in text


def test_a_noisy_row_is_not_resolved_and_never_read_as_the_same():
    s = split_oracle(code_study(offset={FOX: 0.005}, spread={FOX: 0.05}))
    words = [w for f in _rows(s, FOX) for w in f["words"]]
    assert "not resolved" in words and not any(w.startswith("the same") for w in words)
    assert cs.standings(s)[FOX] in ("unresolved", "mixed")
    sentences = cs.answer_sentences(_found(code_study(offset={FOX: 0.005}, spread={FOX: 0.05})),
                                    cg.goal(_found(code_study(offset={FOX: 0.005}, spread={FOX: 0.05}))))
    assert "each of the 8 other rows" not in sentences and "the FoX gate" in sentences


def test_the_control_reading_says_whose_lead_it_is():
    ahead = cs.kernel_text(split_oracle(code_study()))
    assert "ahead at every budget and length: its lead is the kernel's" in ahead
    same = cs.kernel_text(split_oracle(code_study(offset={CONTROL: 0.001})))
    assert "the same within 0.02 at every budget and length: its block, not its kernel" in same


# ------------------------------------------------------------------ the goal

GOAL_CASES = {
    "both hold": (dict(), "met"),
    "a bias level with the kernel": (dict(offset={BUCKETS: 0.002}), "missed"),
    "no row at 128 gains": (dict(gain={ORACLE_ALIBI: 0.06, ORACLE_EULER: 0.05}), "missed"),
    "neither": (dict(offset={BUCKETS: 0.002}, gain={}), "missed"),
    "in progress": (dict(missing=[(FOX, 2)]), "open"),
}


@pytest.mark.parametrize("case", GOAL_CASES)
def test_the_goal_is_met_only_where_both_counts_hold(case):
    changes, state = GOAL_CASES[case]
    found = _found(code_study(**changes))
    g = cg.goal(found)
    assert g["state"] == state
    text = cg.goal_text(g)
    head = {"met": "**Met.**", "missed": "**Missed.**", "open": "**Not yet decided**"}[state]
    assert text.startswith(head), text
    if state == "met":
        assert "The Euler CAT is ahead of every other row at every budget and length" in text
        assert "gains 0.01" in text and "called above zero" in text
    if case == "a bias level with the kernel":
        assert "not called ahead of the bucket bias (at any budget or length)" in text
        assert "The Euler CAT gains" in text
    if case == "no row at 128 gains":
        assert g["kernel"]["met"] and not g["gain"]["uses"]
        assert "No row trained at the training length gains from context beyond it" in text
    if case == "in progress":
        assert "32 of 33 runs" in text and "not trained on every seed" in text
    said = cs.answer_sentences(found, g)
    assert {"met": "is met", "missed": "is missed", "open": "not yet decided"}[state] in said


def test_the_goal_is_met_by_any_row_with_the_cats_kernel():
    # the deep Euler CAT ahead of every row, the Euler CAT included
    g = cg.goal(_found(code_study(offset={EULER_DEEP: -0.05}, gain={EULER_DEEP: 0.01})))
    assert g["state"] == "met" and g["kernel"]["row"] == EULER_DEEP
    assert "The deep Euler CAT is ahead of every other row" in cg.goal_text(g)


def test_a_planned_row_missing_from_the_study_leaves_the_goal_untested():
    artefact = code_study()
    for part in ("rows", "per_seed"):
        artefact[part].pop(FOX)          # refused, say, for want of a rate
    g = cg.goal(_found(artefact, partial=False))
    assert g["state"] == "missed" and g["kernel"]["untested"] == {FOX: [1, 2, 4]}
    assert "the FoX gate (not trained on every seed at 1×, 2× and 4×)" in cg.goal_text(g)


# ------------------------------------------------------------------ over budgets

def test_passes_at_4x_below_one_are_said_as_no_full_pass():
    s = split_oracle(code_study())
    text = co.passes_sentence(s)
    assert "at 4× up to 0.88" in text and "none makes a full pass" in text
    assert "| 0.88 |" in cs.chapter_texts(_found(code_study()), cg.goal(_found(code_study())),
                                          None, None, "no corpus")["passes_table"]
    more = co.passes_sentence(split_oracle(code_study(passes=0.3)))
    assert "up to 1.20" in more and "none makes a full pass" not in more and "more than once" in more


def test_an_overfit_row_is_named_at_its_budget():
    s = split_oracle(code_study(overfit={KERPLE_LOG: {4: 0.2}}))
    assert co.overfit_sentence(s) == ("Overfit (validation CE up from the budget before, training "
                                      "CE down): at 4× the KERPLE-log bias.")
    assert "none overfits" in co.overfit_sentence(split_oracle(code_study()))


def test_the_lowest_row_and_its_margin():
    table = co.lowest_table(split_oracle(code_study()))
    assert table.count("| Euler CAT | bucket bias |") == 6 and table.count("| yes |") == 6
    level = co.lowest_table(split_oracle(code_study(offset={BUCKETS: 0.001})))
    assert level.count("| no |") == 6


def _tiny(offset: dict) -> dict:
    return split_oracle(study(study_rows("tiny"), {1: (0, 1, 2), 2: (0, 1, 2)}, offset=offset))


def test_chapter_11s_order_holds_where_no_called_order_is_reversed():
    s = split_oracle(code_study())
    text = co.order_text(s, _tiny({}))
    assert text.startswith("Chapter 11's order holds at 1× and 2×: no order called on both corpora is reversed.")
    assert "The lowest row is the same on both corpora at 1× and 2×." in text
    table = co.order_table(s, _tiny({}))
    assert "| 1× | Euler CAT (128, 5000) | Euler CAT (128, 5000) |" in table
    assert "| 4×" not in table          # the Tiny Shakespeare study has no 4×


def test_chapter_11s_order_does_not_hold_where_a_called_order_is_reversed():
    # on Tiny Shakespeare RoPE below ALiBi, on code above it; and RoPE the lowest
    tiny = _tiny({ROPE: -0.2, ALIBI: 0.10})
    s = split_oracle(code_study())
    text = co.order_text(s, tiny)
    assert text.startswith("Chapter 11's order does not hold at 1× and 2×"), text
    assert "the ALiBi baseline below the RoPE baseline" in text
    assert "The lowest row differs between the corpora at every budget both measure." in text
    found = co.order_comparison(s, tiny)
    assert all(f["reversed"] for f in found)
    assert all(f["lowest"]["Tiny Shakespeare"] == [ROPE, ROPE] for f in found)


def test_without_chapter_11s_study_the_order_is_not_compared():
    assert "not in `results/`" in co.order_text(split_oracle(code_study()), None)
    assert co.order_table(split_oracle(code_study()), None) == ""


# ------------------------------------------------------------------ context beyond 128

def test_each_rows_gain_is_called_only_where_it_is_above_zero():
    s = split_oracle(code_study())
    table = cc.gains_table(s)
    called = {ln.split(" | ")[0].strip("| ") for ln in table.splitlines()[2:] if ln.endswith("| yes |")}
    assert called == {"Euler CAT", "deep ALiBi on long windows", "Euler CAT on long windows"}
    assert cc.gain_words(s).endswith("1 of the 9 rows trained at 128 gains from context beyond it "
                                     "by a called margin: the Euler CAT.")
    none = split_oracle(code_study(gain={}))
    assert "no row trained at 128 gains from context beyond 128" in cc.gain_words(none)
    assert "Neither oracle row" in cs.oracle_sentence(none)
    assert "worth 0.0595 ± 0.0013" in cs.oracle_sentence(s)


def test_the_curves_draw_the_oracle_and_the_two_best_rows():
    import matplotlib.pyplot as plt

    s = split_oracle(code_study(offset={BUCKETS: 0.01, EULER_DEEP: 0.02}))
    assert cc.best_rows(s) == [EULER, BUCKETS]
    fig, drawn = cc.curves_figure(s)
    try:
        assert drawn == [ORACLE_ALIBI, ORACLE_EULER, EULER, BUCKETS]
        lines = [ln for ln in fig.axes[0].get_lines() if len(ln.get_xdata())]
        assert len(lines) == 8 and {ln.get_linestyle() for ln in lines} == {"-", "--"}
        assert fig.axes[0].get_xscale() == "log"
        c = cc.curve(s, EULER)
        assert np.all(np.diff(c["x"]) > 0) and c["x"][0] >= 128 and c["x"][-1] < 5000
        # the Euler CAT gains beyond 128: its dashed reading lies above its solid one far out
        assert c["sliding"][-1] > c["full"][-1]
    finally:
        plt.close(fig)
    assert "each the mean over its 3 seeds" in cc.curves_caption(s, drawn)


# ------------------------------------------------------------------ finding the artefact

def _write(root: Path, name: str, artefact: dict) -> None:
    (root / "results").mkdir(exist_ok=True)
    (root / "results" / name).write_text(json.dumps(artefact))


def test_no_artefact_says_which_commands_make_it(tmp_path):
    found = load_code_study(tmp_path)
    assert found["study"] is None
    g = cg.goal(found)
    texts = cs.chapter_texts(found, g, None, None, "SymPy 1.13 is installed")
    for key in ("status", "answer", "code_short", "goal"):
        assert "make sweep CORPUS=code" in texts[key] and "make scale CORPUS=code" in texts[key], key
    assert texts["corpus"] == "SymPy 1.13 is installed" and texts["split_table"] == ""
    assert texts["kernel"].startswith("Not measured") and texts["kernel_table"] == ""
    assert g["state"] == "none"


def test_a_partial_artefact_is_read_and_said_to_be_in_progress(tmp_path):
    _write(tmp_path, "scale_code_cpu.partial.json", code_study(missing=[(FOX, 2), (BUCKETS, 1)]))
    found = load_code_study(tmp_path)
    assert found["partial"] and found["path"].name == "scale_code_cpu.partial.json"
    assert planned_runs(found["study"]) == 33
    status = status_text(found)
    assert "study in progress" in status and "holds 31 of its 33 runs" in status
    g = cg.goal(found)
    assert g["state"] == "open"
    assert cs.code_short(found, g).startswith("In a study still in progress (31 of 33 runs)")


def test_the_complete_artefact_is_read_before_a_partial_one(tmp_path):
    _write(tmp_path, "scale_code_cpu.partial.json", code_study(missing=[(FOX, 2)]))
    _write(tmp_path, "scale_code_cpu.json", code_study())
    found = load_code_study(tmp_path)
    assert not found["partial"] and found["path"].name == "scale_code_cpu.json"
    assert status_text(found).endswith("the complete study: all 33 of its runs have finished.")
    assert set(found["study"]["oracle"]) == {ORACLE_ALIBI, ORACLE_EULER}
    assert EULER in found["study"]["rows"] and ORACLE_EULER not in found["study"]["rows"]


# ------------------------------------------------------------------ the corpus

def _small_corpus() -> SimpleNamespace:
    """Three training files, one dev file and two validation files; the validation holds
    "é" twice and "λ" once, characters no training file holds."""
    parts = {"train": ["def f(x):\n    return x\n", "import os\n", "class A:\n    pass\n"],
             "dev": ["y = 1\n"], "val": ["s = 'café é'\n" * 800, "def g(λ):\n    return 2\n" * 800]}
    text, files, at = "", {}, 0
    for part, sources in parts.items():
        files[part] = []
        for i, src in enumerate(sources):
            files[part].append(CodeFile(f"{part}{i}.py", at, at + len(src)))
            text, at = text + src, at + len(src)
    vocab = CodeVocab("".join(parts["train"]))
    val = vocab.encode("".join(parts["val"]))
    return SimpleNamespace(text=text, files={k: tuple(v) for k, v in files.items()}, vocab=vocab,
                           val=val, unknown_in_val=int((val == vocab.unknown).sum()), sources=parts)


def test_the_corpus_text_counts_what_the_corpus_holds():
    corpus = _small_corpus()
    table = csp.split_table(corpus)
    size = {k: sum(map(len, v)) for k, v in corpus.sources.items()}
    assert f"| training | 3 | {size['train']} |" in table and f"| dev | 1 | {size['dev']} |" in table
    assert f"| validation | 2 | {size['val']:,} |" in table
    assert csp.unseen(corpus) == sorted(set("".join(corpus.sources["val"])) - set("".join(corpus.sources["train"])))
    assert {"é", "λ"} <= set(csp.unseen(corpus))
    assert UNKNOWN == corpus.vocab.chars[-1]
    text = csp.corpus_text(corpus, {"scoring": {"lengths": [16, 64], "span_length": 64,
                                                "span_tiles": 21}})
    assert f"{len(corpus.vocab) - 1} distinct characters of the training files" in text
    assert f"hold {corpus.unknown_in_val:,} characters that no training file holds" in text
    new = csp.unseen(corpus)
    assert len(new) == 6 and f"({len(new)} distinct: U+0027, U+0032, U+003D, U+0067, U+00E9 and 1 more)" in text
    assert "21 stretches of 64 characters" in text and "(1,344 characters, from 2 of the 2 files)" in text


def test_the_span_reads_the_validation_files_the_study_scores():
    corpus = _small_corpus()
    one = csp.span(corpus, 1, 64)
    assert one["files"] == 1 and one["characters"] == 64
    assert csp.span(corpus, 21, 64)["files"] == 2


# ------------------------------------------------------------------ prose and the page

def _texts() -> list[str]:
    out = []
    for changes in (dict(), dict(offset={BUCKETS: 0.002}, gain={}), dict(missing=[(FOX, 2)]),
                    dict(offset={FOX: 0.005}, spread={FOX: 0.05})):
        found = _found(code_study(**changes))
        g = cg.goal(found)
        texts = cs.chapter_texts(found, g, _tiny({ROPE: -0.2}), None, "")
        out += [v for k, v in texts.items() if not k.endswith("table") and k != "answer"]
        out.append(cs.answer_sentences(found, g))
    return out


def test_generated_sentences_read_as_a_person_wrote_them():
    labels = list(NAMES.values())
    for text in _texts():
        assert not prose_problems(text, labels), (prose_problems(text, labels), text)
        assert "-0.000" not in text and "nan" not in text.lower()


def test_at_most_three_sentences_answer():
    from catlib.common.verdicts import sentences

    for changes in (dict(), dict(offset={BUCKETS: 0.002}), dict(missing=[(FOX, 2)])):
        found = _found(code_study(**changes))
        assert len(sentences(cs.answer_sentences(found, cg.goal(found)))) <= 3


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def test_the_page_follows_the_books_conventions():
    cells = _cells()
    tags = [c.get("metadata", {}).get("tags", []) for c in cells]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert "parameters" in code[0]["metadata"]["tags"]
    params = "".join(code[0]["source"])
    assert all(f"{p} = " in params for p in ("device", "profile", "figure_dir"))
    setup = "".join(code[1]["source"])
    assert "page.check_parameters(globals())" in setup and "ROOT, dev = page.setup(device)" in setup
    assert tags[-1] == ["nbval-check-output"]
    # the checked output reads no artefact: it is the same with or without one
    read = {n.id for n in ast.walk(ast.parse("".join(cells[-1]["source"]))) if isinstance(n, ast.Name)}
    assert not read & {"study", "found", "goal", "tiny", "studies", "text"}, read
    head = " ".join("".join(cells[0]["source"]).split()[:150]).lower()
    assert "question" in head or "?" in head
    assert "answer" in head
    assert 'glue("code_short", Plain(' in "".join("".join(c["source"]) for c in code)


def test_the_chapter_is_registered():
    from catlib.book.profiles import PROFILES

    assert all(table.get("12_code") == {} for table in PROFILES.values())
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    assert "book/notebooks/11_scale\n      - file: book/notebooks/12_code\n" in toc
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "notebooks/12_code.ipynb::code_short:s" in intro and "Chapter 12" in intro


@pytest.mark.parametrize("case", ["none", "partial", "complete"])
def test_the_notebook_runs_with_and_without_an_artefact(case, tmp_path, monkeypatch):
    """The notebook executed as the runner executes it (papermill, a kernel), in a scratch
    book root whose results/ holds no artefact, a partial one, or a complete one."""
    from catlib.book.execution import execute

    (tmp_path / "_config.yml").write_text("title: scratch\n")
    (tmp_path / "notebooks").mkdir()        # a book root: find_root looks for both
    if case == "partial":
        _write(tmp_path, "scale_code_cpu.partial.json", code_study(missing=[(FOX, 2)]))
    elif case == "complete":
        _write(tmp_path, "scale_code_cpu.json", code_study(offset={BUCKETS: 0.002}))
    params = {"device": "cpu", "profile": "smoke", "figure_dir": ""}
    execute("12_code", params, ROOT / "notebooks", tmp_path / "out", timeout=300)
    nb = json.loads((tmp_path / "out" / "12_code.ipynb").read_text(encoding="utf-8"))
    glued = {}
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                data = o["data"]
                glued[name] = "".join(data.get("application/papermill.record/text/markdown")
                                      or data.get("application/papermill.record/text/plain", ""))
    checked = "".join(nb["cells"][-1]["outputs"][0]["text"])
    assert checked.startswith("rows of the code study: 11 budgets: [1, 2, 4]")
    if case == "none":
        assert glued["status"].startswith("No study on source code is in `results/`")
        assert "make scale CORPUS=code" in glued["answer"]
    elif case == "partial":
        assert "study in progress" in glued["status"] and "32 of its 33 runs" in glued["status"]
        assert glued["goal"].startswith("**Not yet decided**")
    else:
        assert "the same within 0.02 as the bucket bias" in glued["answer"]
        assert glued["goal"].startswith("**Missed.**")
        assert "none makes a full pass" in glued["passes"]
    assert glued["code_short"]


def test_every_row_of_the_code_study_is_named():
    rows = study_rows("code")
    assert {ALIBI, ALIBI_DEEP, ROPE, EULER, EULER_DEEP, CONTROL, BUCKETS, KERPLE_LOG, FOX} <= set(rows)
    assert all(r in NAMES for r in rows)


def test_the_readme_block_carries_chapter_12s_line_after_chapter_11s_answer(tmp_path):
    """Issue 62, item 4: the README block gets one line for chapter 12 (the line chapter 12
    writes to book/_generated/code_answer.md), after chapter 11's answer and before the
    tables of chapter 10."""
    import json

    from catlib import book
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "scale_cpu.json").write_text(json.dumps(
        {"plan": {"1": [0]}, "rows": {}, "provenance": {"git": {"commit": "c0c0fb99f53b"}}}))
    generated = tmp_path / "book" / "_generated"
    generated.mkdir(parents=True)
    (generated / "headline_table.md").write_text("| a |\n|---|\n| 1 |\n")
    (generated / "equal_compute.md").write_text("At equal training compute (chapter 10): t\n")
    (generated / "scale_answer.md").write_text("Over budgets (on a CPU, chapter 11): words.\n")
    (generated / "code_answer.md").write_text("On source code (chapter 12): code words.\n")
    records = [book.Record("06_context_length", "cpu", "cpu", 1.0, "ok", "now")]
    text = book.publish_headline(tmp_path, "cpu", records).read_text()
    assert text.count("On source code (chapter 12): code words.") == 1
    assert (text.index("Over budgets (on a CPU") < text.index("On source code (chapter 12)")
            < text.index("At equal training compute"))


def test_the_chapter_lists_each_rows_rate_from_the_artefact():
    """Issue 61 item 5 on code: the page lists each row's rate (the sweep's choice)."""
    s = split_oracle(code_study())
    for table in (s["rows"], s["oracle"]):
        for label in table:
            table[label]["rate"] = 8e-3 if label == ROPE else 4e-3
    s["rates"] = {"from": "sweep"}
    text = cs.rates_text(s)
    assert text.startswith("Each row trains at the rate the sweep on the dev files chose for it")
    assert ": 0.004, but the RoPE baseline at 0.008; the oracle rows take their twins' rates." in text
    assert not prose_problems(text, list(NAMES.values()))
    s["rates"] = {"from": "recipe"}
    for table in (s["rows"], s["oracle"]):
        for label in table:
            table[label]["rate"] = 4e-3
    assert cs.rates_text(s) == ("Each row trains at the recipe's single rate: 0.004, for every "
                                "row; the oracle rows take their twins' rates.")


def test_the_readme_line_is_republished_from_the_code_artefact_without_a_build(tmp_path):
    """After make scale CORPUS=code and before the next build, the README block's chapter 12
    line says what the artefact says, labelled with its commit (the build's line said no
    study was there); the rest of the block is kept."""
    from catlib.book.publish import README_MARKERS, republish_code_line
    (tmp_path / "results").mkdir()
    artefact = dict(code_study(), provenance={"git": {"commit": "c0de00c0de00beef"}, "profile": "cpu"})
    (tmp_path / "results" / "scale_code_cpu.json").write_text(json.dumps(artefact))
    block = ("_Written by the build._\n\nOver budgets (chapter 11): words.\n\n"
             "On source code (chapter 12): No study on source code is in results/ in this build.\n\n"
             "| table |\n")
    (tmp_path / "results" / "headline_cpu.md").write_text(block)
    start, end = README_MARKERS
    (tmp_path / "README.md").write_text(f"intro\n{start}\nold\n{end}\nrest\n")
    republish_code_line(tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert "No study on source code" not in readme and readme.endswith("rest\n")
    assert "On source code (chapter 12): On Python source at 1×, 2× and 4×, the Euler CAT" in readme
    assert "_(From `scale_code_cpu.json`, commit c0de00c0de00.)_\n\n| table |" in readme
    assert "Over budgets (chapter 11): words." in readme
