"""Chapter 10's paragraph on issue 42's recount, and the short lead clause the intro pastes."""
import json
from pathlib import Path

from catlib.book.recount import recount_paragraph
from catlib.common.verdicts import MAX_BOLD_WORDS, prose_problems, short_lead
from catlib.experiment import grid as ex

ROOT = Path(__file__).resolve().parent.parent


def test_short_lead_names_the_leader_or_says_the_sides_change():
    assert short_lead([0.12, 0.14], "the CAT", "ALiBi") == "the CAT leads at every length, by 0.12-0.14 nats"
    assert short_lead([-0.05, -0.02], "the CAT", "ALiBi") == "ALiBi leads at every length, by 0.020-0.050 nats"
    assert short_lead([0.1, -0.1], "the CAT", "ALiBi") == "the lead changes sides between lengths"
    assert len(short_lead([0.123, 0.5], "the CAT", "ALiBi given its compute as steps").split()) <= MAX_BOLD_WORDS


def test_the_recount_paragraph_reads_the_committed_record():
    rc = json.loads((ROOT / "results" / "recount_cpu.json").read_text())
    assert rc["steps"][ex.AS_STEPS] == {"old": 2145, "new": 1948}     # counted by both rules
    text = recount_paragraph(rc, {ex.AS_STEPS: 1948, ex.AS_LAYERS: 500}, 3.90, "cpu",
                             ex.MATCHED, ex.AS_STEPS, ex.AS_LAYERS)
    assert "2145 steps" in text and "(this build, profile cpu: 1948)" in text
    assert "ALiBi given the CAT's compute as steps leads at every length, by 0.12-0.14 nats" in text
    assert "4.29 times ALiBi's training FLOPs, not 3.90" in text
    assert not prose_problems(text, [ex.MATCHED, ex.AS_STEPS, ex.AS_LAYERS])
