"""What the loop trains: a **task** (one architecture, its seeds and learning rates) and the
**source** the tasks come from.

The loop (:mod:`._loop`) is the same for every source: claims, deduplication, help-or-wait,
heartbeats, reaping and storage are written once there. A source says what is left, what one
trial trains, and how its result is filed. Two sources exist:

- the architecture search (:class:`._sampled.Sampled`): the baselines (queued first), then the
  sampler's proposals, keyed by ``arch_id``;
- a stage's fixed list (``normsearch.stages``: the confirmation, a ladder rung), keyed by
  (architecture, seeds, learning rates), with racing's rounds added as it goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..records import A_ARCH
from ..spec import Placement


@dataclass(frozen=True)
class Task:
    """What one trial trains: ``key`` deduplicates it (a finished trial with the same key is reused, a
    running one is waited for), ``train`` holds its seeds, learning rates and extending sweep."""

    key: str
    arch_id: str
    label: str
    placement: Placement
    baseline: str | None
    train: Any  # TrainConfig
    attrs: dict = field(default_factory=dict)  # more user attributes for the trial (a stage's task key)


class TaskSource:
    """Where a study's tasks come from. The defaults are a fixed, queued list's."""

    #: the user attribute that keys a trial's task (and the census)
    key_attr: str = A_ARCH

    def prepare(self, search) -> None:
        """Before the loop: queue what is known to be needed."""

    def need(self, search, census) -> int:
        """Tasks still to finish (0: nothing left but what is running)."""
        raise NotImplementedError

    def progress(self, search, census) -> tuple[int, int, str]:
        """(done, total, info) for the progress line."""
        raise NotImplementedError

    def runs(self, search, census) -> tuple[int, int] | None:
        """(runs done, runs in all) for the time-left estimate, or None (counted in tasks then)."""
        return None

    def refill(self, search, census) -> bool:
        """Nothing is queued and more is needed than is running: queue it again (a task whose trial
        failed). True when something was queued; False when the loop should ask a fresh trial
        (a proposal) instead, or, for a source that never proposes, help or wait."""
        return False

    def proposes(self) -> bool:
        """Whether a fresh trial (none queued) is a proposal of this source."""
        return False

    def hold(self, search, census) -> bool:
        """True when a fresh proposal may not be asked for yet (the worker helps or waits)."""
        return False

    def task(self, search, trial) -> Task | None:
        """What ``trial`` trains; None when it has nothing to do (it is released as surplus)."""
        raise NotImplementedError

    def surplus(self, search, trial, task: Task, census) -> bool:
        """Whether a task, once deduplicated, is one too many."""
        return False

    def values(self, search, score) -> list[float]:
        return [score.value]

    def record_path(self, search, trial, task: Task):
        """Where the trial's record is written before it is stored."""
        return search.handle.runs_dir / task.arch_id / "arch.json"

    def more(self, search, census) -> bool:
        """Everything is finished: add more work (a racing round) and return True, or end (False)."""
        return False

    def test_bytes(self) -> int | None:
        """Score runs on a test split of this many bytes, or None (validation)."""
        return None

    def train_of(self, search, trial):
        """The training settings of another worker's trial (its runs are what a helper may take);
        None when it has no task."""
        return search.train_config()
