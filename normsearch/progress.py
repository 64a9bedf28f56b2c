"""Rich progress display: one bar per run (step, loss, tokens/s), and a study line on top
(architectures done / total, best score so far against the best baseline, the time elapsed and an
estimate of the time left)."""

from __future__ import annotations

import time
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text


def left_text(seconds: float) -> str:
    """``~45s left``, ``~3m20s left``, ``~2h05m left``."""
    s = max(1, round(seconds))
    if s < 60:
        return f"~{s}s left"
    if s < 3600:
        return f"~{s // 60}m{s % 60:02d}s left"
    return f"~{s // 3600}h{s % 3600 // 60:02d}m left"


class Remaining:
    """The time left of a study: the time per unit of work finished since the study line was first
    drawn, times the units still to do. The unit is a finished run when the caller counts runs (the
    work is runs; architectures differ in how many they train), else a finished architecture.
    Counting from the first report leaves out what an earlier session of a resumed study did. A count
    that goes back (the same line now shows the next stage: the confirmation after the search) starts
    the estimate again. None until a unit has finished, and once the work is done."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.start: tuple[float, int] | None = None  # (time, units done) when counting began
        self.last: int | None = None

    def __call__(self, done: int, total: int | None) -> float | None:
        now = self.clock()
        if self.start is None or (self.last is not None and done < self.last):
            self.start = (now, done)
        self.last = done
        t0, d0 = self.start
        if total is None or done <= d0 or done >= total:
            return None
        return (now - t0) / (done - d0) * (total - done)


class _LeftColumn(ProgressColumn):
    """The study line's ``12/40 runs  ~3m20s left`` (a task's ``left`` field; the run bars have none)."""

    def render(self, task) -> Text:
        return Text(task.fields.get("left", ""), style="progress.remaining")


def _columns():
    return (TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), _LeftColumn())


def _left(remaining: Remaining, done: int, total: int, runs_done: int | None, runs_total: int | None) -> str:
    """The text of the study line's last column: the runs when counted, and the estimate of the time left."""
    runs = runs_done is not None and runs_total is not None
    seconds = remaining(runs_done, runs_total) if runs else remaining(done, total)
    parts = [f"{runs_done}/{runs_total} runs"] if runs else []
    if seconds is not None:
        parts.append(left_text(seconds))
    return "  ".join(parts)


class RunBar:
    """A :class:`normsearch.train.Progress` that draws a rich bar per run."""

    def __init__(self, console: Console | None = None, study: str | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.console = console or Console(stderr=True)
        self.progress = Progress(*_columns(), console=self.console, transient=False)
        self.remaining = Remaining(clock)
        self.study_task = self.progress.add_task(study, total=None, info="", visible=study is not None)
        self.task = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.progress.live.is_started:
            self.progress.stop()

    def _show(self):
        # started on first use, so an error raised before any training prints nothing but itself
        if not self.progress.live.is_started:
            self.progress.start()

    def study(self, done: int, total: int, info: str, *, runs_done: int | None = None,
              runs_total: int | None = None):
        """The study line: ``done`` of ``total`` architectures (or a stage's tasks), ``info`` beside them;
        ``runs_done`` of ``runs_total`` runs, when the caller counts them, are what the time left is
        estimated from (else the architectures)."""
        self._show()
        left = _left(self.remaining, done, total, runs_done, runs_total)
        self.progress.update(self.study_task, completed=done, total=total, info=info, left=left, visible=True)

    def start(self, label: str, total_steps: int) -> None:
        self._show()
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(f"  {label}", total=total_steps, info="")

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        self.progress.update(self.task, completed=step, info=f"loss {loss:.3f}  {tokens_per_s:,.0f} tok/s")

    def end(self, result) -> None:
        info = result.outcome() + ("" if result.diverged or result.pruned else f"  {result.tokens_per_s:,.0f} tok/s")
        self.progress.update(self.task, completed=result.steps, info=info)


class JsonLines:
    """The same events as :class:`RunBar`, one JSON object per line on stdout, for a parent
    process that shows several workers together (``normsearch run --devices``)."""

    def __init__(self, worker: str):
        self.worker = worker

    def _emit(self, **event):
        import json
        import sys

        print(json.dumps({"worker": self.worker, **event}), file=sys.stdout, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def study(self, done: int, total: int, info: str, *, runs_done: int | None = None,
              runs_total: int | None = None):
        self._emit(event="study", done=done, total=total, info=info, runs_done=runs_done, runs_total=runs_total)

    def start(self, label: str, total_steps: int) -> None:
        self._emit(event="start", label=label, total=total_steps)

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        self._emit(event="update", step=step, loss=loss, tokens_per_s=tokens_per_s)

    def end(self, result) -> None:
        self._emit(event="end", steps=result.steps, outcome=result.outcome())


class WorkersView:
    """Several workers' JSON-lines progress in one rich display: a study line and a bar per worker. The
    time left is estimated here, on this process's clock, from the counts the workers send."""

    def __init__(self, study: str, workers: list[str], console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.progress = Progress(*_columns(), console=console or Console(stderr=True))
        self.remaining = Remaining(clock)
        self.study_task = self.progress.add_task(study, total=None, info="")
        self.tasks = {w: self.progress.add_task(f"  {w}", total=None, info="waiting") for w in workers}

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def handle(self, line: str):
        import json

        try:
            e = json.loads(line)
        except ValueError:
            return
        task = self.tasks.get(e.get("worker"))
        kind = e.get("event")
        if kind == "study":  # runs_done/runs_total: absent from a worker of an earlier version
            left = _left(self.remaining, e["done"], e["total"], e.get("runs_done"), e.get("runs_total"))
            self.progress.update(self.study_task, completed=e["done"], total=e["total"], info=e["info"], left=left)
        elif task is None:
            return
        elif kind == "start":
            self.progress.update(task, description=f"  {e['worker']} {e['label']}", completed=0, total=e["total"],
                                 info="")
        elif kind == "update":
            self.progress.update(task, completed=e["step"],
                                 info=f"loss {e['loss']:.3f}  {e['tokens_per_s']:,.0f} tok/s")
        elif kind == "end":
            self.progress.update(task, completed=e["steps"], info=e["outcome"])
