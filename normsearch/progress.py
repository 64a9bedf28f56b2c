"""Rich progress display: one bar per run (step, loss, tokens/s), and a study line on top
(trials done / total, best score so far against the best baseline)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunBar:
    """A :class:`normsearch.train.Progress` that draws a rich bar per run."""

    def __init__(self, console: Console | None = None, study: str | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
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

    def study(self, done: int, total: int, info: str):
        self._show()
        self.progress.update(self.study_task, completed=done, total=total, info=info, visible=True)

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

    def study(self, done: int, total: int, info: str):
        self._emit(event="study", done=done, total=total, info=info)

    def start(self, label: str, total_steps: int) -> None:
        self._emit(event="start", label=label, total=total_steps)

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        self._emit(event="update", step=step, loss=loss, tokens_per_s=tokens_per_s)

    def end(self, result) -> None:
        self._emit(event="end", steps=result.steps, outcome=result.outcome())


class WorkersView:
    """Several workers' JSON-lines progress in one rich display: a study line and a bar per worker."""

    def __init__(self, study: str, workers: list[str], console: Console | None = None):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                 console=console or Console(stderr=True))
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
        if kind == "study":
            self.progress.update(self.study_task, completed=e["done"], total=e["total"], info=e["info"])
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
