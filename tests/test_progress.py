"""The progress line of the book's training stage: runs done of total, steps done across
the workers and the time left, on a terminal (in place) and in a log (plain lines)."""
import io
import re
import time

import pytest

from catlib.experiment import grid as ex
from catlib.experiment.progress import PoolProgress, reporter

SIZES = dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic", solver_steps=1,
             dropout=0.0)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _array(jobs):
    return [-1, 0] * jobs


def test_line_counts_runs_and_steps_and_extrapolates_the_time_left():
    clock, steps = Clock(), _array(3)
    line = PoolProgress([300.0, 100.0, 100.0], [100, 50, 50], steps, clock=clock)
    assert "0/3 runs done, 0/200 steps" in line.line() and "time left unknown" in line.line()
    for s in range(50):                   # job 0 half way after 60 s
        reporter(0, steps)({"step": s})
    clock.now = 60.0
    # done: 150 of 500 cost units in 60 s -> 2.5 units/s; 350 left -> 140 s
    assert line.eta() == pytest.approx(140.0)
    assert line.line() == ("training: 0/3 runs done, 50/200 steps, 1 min elapsed, "
                           "about 2 min left")
    line.finished(1, reused=True)          # a reused run: counted done, measures no speed
    assert "1/3 runs done, 100/200 steps" in line.line()
    assert line.eta() == pytest.approx(100.0)


def test_a_resumed_run_counts_only_the_steps_of_this_session():
    clock, steps = Clock(), _array(1)
    line = PoolProgress([100.0], [100], steps, clock=clock)
    for s in range(80, 90):                # resumed at step 80: 10 steps in 10 s
        reporter(0, steps)({"step": s})
    clock.now = 10.0
    assert line.eta() == pytest.approx(10.0)   # 10 steps' worth left at 1 per second


def test_plain_lines_in_a_log_and_one_live_line_on_a_terminal():
    steps = _array(1)
    printed = []
    line = PoolProgress([1.0], [10], steps)
    with line.running(printed.append, every=0.05, stream=io.StringIO()) as say:
        reporter(0, steps)({"step": 3})
        time.sleep(0.3)
        say("a run ended")
    assert "a run ended" in printed
    assert sum("runs done" in p for p in printed) >= 3       # a plain line every 0.05 s
    assert all("\r" not in p for p in printed)

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    term, printed = Terminal(), []
    with line.running(printed.append, refresh=0.05, stream=term) as say:
        time.sleep(0.3)
        say("a run ended")
    assert term.getvalue().count("\r\x1b[K") >= 3 and "4/10 steps" in term.getvalue()
    assert printed[0] == "a run ended" and "runs done" in printed[-1]   # the last word


@pytest.mark.slow("trains two runs in a pool of worker processes")
def test_the_training_stage_reports_progress(tmp_path, tiny_path, monkeypatch):
    # Two workers, as the book trains: their steps reach the parent's line.
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    printed = []
    ex.train_rows(("causal CAT", "RoPE baseline"), [0], SIZES,
                  dict(train_steps=40, lr=4e-3, batch=2, seq=16), root=tmp_path, device="cpu",
                  lengths=[16], eval_windows=2, jobs=2, echo=printed.append,
                  progress_every=0.5)
    lines = [p for p in printed if p.startswith("training: ")]
    assert lines and lines[-1].startswith("training: 2/2 runs done, 80/80 steps"), printed
    assert all(re.search(r"\d+/2 runs done, \d+/80 steps, .* elapsed, "
                         r"(about .* left|time left unknown yet)", p) for p in lines), lines
    assert sum("trained run" in p for p in printed) == 2
