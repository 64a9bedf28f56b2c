"""Rich progress display: one bar per trial (step, loss, tokens/s), and a study line on top
(trials done / total, best score so far against the best baseline)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class TrialBar:
    """A :class:`normsearch.trial.Progress` that draws a rich bar per trial."""

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
        if result.diverged:
            info = f"[diverged at step {result.diverged_step}]"
        elif result.pruned:
            info = f"[pruned at step {result.steps}]"
        else:
            info = f"val {result.value:.4f} bits/byte  {result.tokens_per_s:,.0f} tok/s"
        self.progress.update(self.task, completed=result.steps, info=info)
