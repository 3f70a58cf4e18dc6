"""Progress of a pool of training jobs: runs done of total, steps done across the workers,
and the time left, on one line.

Each job writes how far its training has come into a shared array (two 64-bit integers
per job: the step its session started from and the steps done), from its worker process
or from this one, at every step; writing two integers costs nothing next to a step. The
parent reads the array and prints one line: in place on a terminal (every ``refresh``
seconds), and as a plain line every ``every`` seconds where the output is a file or a
notebook, so that a log shows the progress too.

The time left is the expected cost of what remains (:func:`catlib.experiment.pool.expected_cost`
per job, in its own units) divided by the rate measured so far in those units: the
expected costs only weigh the jobs against each other, the clock sets the pace.
"""
from __future__ import annotations

import math
import sys
import threading
import time
from typing import Callable, Sequence

_STEPS = None  # in a worker: the shared array of the pool (set by :func:`attach`)


def shared_steps(context, jobs: int):
    """The shared array of ``jobs`` jobs, from a multiprocessing ``context``: entry 2 j is
    the step job j's session started from (-1: none yet), 2 j + 1 the steps it has done."""
    steps = context.RawArray("q", 2 * jobs)
    for j in range(jobs):
        steps[2 * j] = -1
    return steps


def attach(steps) -> None:
    """In a worker process (a pool's initializer): the array its jobs report into."""
    global _STEPS
    _STEPS = steps


def reporter(index: int, steps=None) -> Callable[[dict], None]:
    """``on_step(metrics)`` for job ``index``: records the steps done (``step`` is 0-based)
    in ``steps`` (default: the array :func:`attach` gave this process)."""
    array = _STEPS if steps is None else steps

    def on_step(m: dict) -> None:
        if array is None:
            return
        if array[2 * index] < 0:
            array[2 * index] = m["step"]       # a resumed run starts past 0
        array[2 * index + 1] = m["step"] + 1
    return on_step


def _duration(seconds: float) -> str:
    """'45 s', '12 min', '1 h 05 min'."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class PoolProgress:
    """The line of a pool of jobs: ``costs[j]`` their expected costs, ``totals[j]`` their
    training steps, ``steps`` the shared array they report into (:func:`shared_steps`).

    :meth:`finished` marks a job done (``reused``: it trained nothing here); :meth:`line`
    is the text; :meth:`running` shows it while a block runs: ``echo(line)`` every ``every``
    seconds, or, when ``stream`` is a terminal, the line rewritten in place every
    ``refresh`` seconds (``echo`` then prints the other lines, above it); ``every=0``: not
    shown. Once shown, it is printed a last time when the block ends; a pool done before
    the first refresh shows nothing.
    """

    def __init__(self, costs: Sequence[float], totals: Sequence[int], steps, *,
                 clock: Callable[[], float] = time.monotonic):
        self.costs, self.totals, self.steps = list(costs), list(totals), steps
        self.done = [False] * len(costs)
        self.reused = [False] * len(costs)
        self.clock = clock
        self.start = clock()

    def finished(self, index: int, reused: bool = False) -> None:
        self.done[index], self.reused[index] = True, reused

    def _fractions(self, j: int) -> tuple[float, float]:
        """(where job j's session started, where it is now), as fractions of its work."""
        total, first, now = self.totals[j], self.steps[2 * j], self.steps[2 * j + 1]
        if self.reused[j]:
            return 1.0, 1.0
        began = max(first, 0) / total
        return began, 1.0 if self.done[j] else min(now / total, 1.0)

    def eta(self) -> float | None:
        """Seconds left: expected cost left over the cost done per second so far; None
        before anything was measured."""
        done = left = 0.0
        for j, cost in enumerate(self.costs):
            began, now = self._fractions(j)
            done += cost * (now - began)
            left += cost * (1.0 - now)
        elapsed = self.clock() - self.start
        if left == 0:
            return 0.0
        if done <= 0 or elapsed <= 0:
            return None
        return left / (done / elapsed)

    def line(self) -> str:
        """'training: 3/25 runs done, 41200/70000 steps, 4 min elapsed, about 12 min left'."""
        steps = sum(t if self.done[j] else min(self.steps[2 * j + 1], t)
                    for j, t in enumerate(self.totals))
        eta = self.eta()
        left = "time left unknown yet" if eta is None or not math.isfinite(eta) \
            else f"about {_duration(eta)} left"
        return (f"training: {sum(self.done)}/{len(self.done)} runs done, "
                f"{steps}/{sum(self.totals)} steps, "
                f"{_duration(self.clock() - self.start)} elapsed, {left}")

    def running(self, echo: Callable[[str], None] | None, every: float = 30.0,
                refresh: float = 2.0, stream=None) -> "_Shown":
        """A context manager that shows the line while its block runs; it yields the echo
        to use for other lines meanwhile."""
        return _Shown(self, echo, every, refresh, stream if stream is not None else sys.stdout)


class _Shown:
    """:meth:`PoolProgress.running`: a daemon thread that shows the line."""

    def __init__(self, progress: PoolProgress, echo, every: float, refresh: float, stream):
        self.progress, self.echo, self.stream = progress, echo, stream
        self.live = bool(every) and echo is not None and _is_terminal(stream)
        self.period = (refresh if self.live else every) if every else 0  # 0: not shown
        self.stop = threading.Event()
        self.shown = False          # whether the line was shown (a quick pool shows none)
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Callable[[str], None] | None:
        if self.echo is not None and self.period:
            self.thread.start()
        return self.say if self.echo is not None else None

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        if self.live:
            self._clear()
        if self.shown and exc[0] is None:
            self.say(self.progress.line())      # the last word: everything done

    def say(self, text: str) -> None:
        """Print ``text`` (through ``echo``) above the live line."""
        with self.lock:
            if self.live:
                self._clear()
            self.echo(text)
            if self.live and not self.stop.is_set():
                self._draw()

    def _loop(self) -> None:
        while not self.stop.wait(self.period):
            if all(self.progress.done):
                continue                    # the pool is closing: the last word follows
            with self.lock:
                self.shown = True
                if self.live:
                    self._draw()
                else:
                    self.echo(self.progress.line())

    def _draw(self) -> None:
        self.stream.write("\r\x1b[K" + self.progress.line())
        self.stream.flush()

    def _clear(self) -> None:
        self.stream.write("\r\x1b[K")
        self.stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
