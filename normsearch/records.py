"""What a study stores, as typed records: one :class:`RunResult` per run, one :class:`ArchRecord` per
architecture. Torch-free and Optuna-free, so the search, the ranking and the report share it.

Words, one per concept:

- a **run** is one training of one architecture at one seed and one learning rate
  (:func:`normsearch.train.train_run` makes one and returns its :class:`RunResult`);
- an Optuna **trial** is one architecture evaluated over all the recipe's runs; its user attributes
  hold the :class:`ArchRecord` (``to_attrs``) and each run under its :func:`run_key`.

The attribute names and the files under ``results/<name>/runs/`` are a storage format that studies
written by earlier versions share: change them only with a reader for the old ones (the tests keep a
study database from before, ``tests/fixtures/study_v1``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# user attributes of a trial
A_ARCH, A_BASELINE, A_LABEL, A_PLACEMENT, A_SITES = "arch_id", "baseline", "label", "placement", "sites"
A_WORKER, A_HEARTBEAT, A_SCORE, A_REUSED = "worker", "heartbeat", "score", "reused_from"
A_FAILED, A_RUNS = "failure", "runs"  # A_RUNS: the list of run keys; each run is its own attribute
A_RECIPE = "recipe"  # a study attribute: the resolved recipe, stored once
A_LR_EXTENDED = "lr_extended"  # learning rates the extending sweep added to train.lr, in order
A_TASK, A_SEEDS, A_LRS = "task", "task_seeds", "task_lrs"  # a stage's trial: its key, seeds and learning rates
A_PROPOSAL = "proposal"  # a searched trial's proposal number (normsearch.search._propose)
A_CONTROL = "control"  # a control proposal's index j: a uniform draw from the space (search.control)
A_STARTUP = "startup"  # a sampler's proposal: True when drawn at random before its model took over
STAGE_SEP = "/"  # a stage of study S is the study S/<kind> (confirm, ladder-<i>): a name no recipe can take
RUN_PREFIX = "run:"


def control_label(j: int) -> str:
    """The label of control proposal j: ``c<j>`` (the sampler's proposals are ``t<n>``)."""
    return f"c{j}"


def is_control_label(label: str, is_baseline: bool = False) -> bool:
    """Whether a ranking's row label names a control proposal (``c0``, ``c12``): the row of an architecture
    that a control drew first."""
    return not is_baseline and len(label) > 1 and label[0] == "c" and label[1:].isdigit()


def run_key(seed: int, lr: float, tag: str = "") -> str:
    """The attribute name of one run in its trial: ``run:s0:lr0.003``, and ``run:s0:lr0.003:init-small``
    for a run in a variant of the tuned grid (:func:`normsearch.grid.variant_tag`)."""
    return f"{RUN_PREFIX}s{seed}:lr{lr:g}" + (f":{tag}" if tag else "")


def run_stem(seed: int, lr: float, tag: str = "") -> str:
    """The file name (without suffix) of one run under ``runs/<arch_id>/``: ``seed0_lr0.003``,
    ``seed0_lr0.003_init-small`` in a variant."""
    return f"seed{seed}_lr{lr:g}" + (f"_{tag}" if tag else "")


def parse_run_key(key: str) -> tuple[str, str, str]:
    """``run:s0:lr0.003`` -> ('0', '0.003', ''), ``run:s0:lr0.003:init-small`` -> ('0', '0.003', 'init-small'),
    as written (the file name is built from these)."""
    seed, lr, *tag = key[len(RUN_PREFIX):].split(":")
    return seed[1:], lr[2:], tag[0] if tag else ""


@dataclass
class RunResult:
    """Everything one run produced. ``value`` is validation bits per byte at the end (None if the
    run diverged)."""

    arch_id: str
    label: str | None
    placement: dict
    n_layers: int
    seed: int
    lr: float
    value: float | None
    metric: str = "val_bpb"
    diverged: bool = False
    diverged_step: int | None = None
    diverged_reason: str | None = None
    pruned: bool = False
    spikes: int = 0
    steps: int = 0  # steps actually trained
    curve: list[dict] = field(default_factory=list)  # per evaluation: step, val_bpb, train_loss
    train_loss: list[list[float]] = field(default_factory=list)  # [step, loss] every few steps
    diagnostics: list[dict] = field(default_factory=list)  # per evaluation, see normsearch._monitor._diagnostics
    wall_time: float = 0.0
    tokens_per_s: float = 0.0
    n_params: int = 0
    n_norm_params: int = 0
    precision: str = ""  # what the run trained in: 32-true, bf16-mixed or 16-mixed (train.precision resolved)
    # train.precision auto: what it chose and why, {chosen, fp32_tok_s, bf16_tok_s, ratio, margin, cached, reason}
    # (normsearch._precision.PrecisionChoice); None when the recipe named the precision
    precision_choice: dict | None = None
    kernels: str = ""
    triton_version: str | None = None
    device: str = ""
    torch_version: str = ""
    data_key: str = ""
    bytes_per_token: float = 1.0
    unigram_bpb: float | None = None  # the validation loss of a model that learned only token frequencies
    worker: str = ""  # the worker that trained it (host:pid)
    compiled: bool = False  # torch.compile of the training forward
    tf32: bool = False  # TF32 matmuls (32-true on a GPU that has them)
    # what else changes a run's losses, bit for bit (the seed, lr and recipe aside): the CPU threads of its
    # reductions, and the instruction set torch's CPU kernels dispatch to (kernels, precision, device above)
    threads: int = 0
    cpu: str = ""
    # the test split (a confirmation run): value is then its bits/byte and metric "test_bpb"
    test_windows: int = 0
    test_se: float | None = None  # the evaluation's own noise: bootstrap SE over the test windows
    val_bpb: float | None = None  # the final validation loss of a run scored on the test split
    # the cell of the tuned grid besides the learning rate (normsearch.grid): {"init": "small", "warmup": 60};
    # empty when the recipe tunes the learning rate alone
    variant: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})

    def compact(self) -> dict[str, Any]:
        """The run as stored in the study: everything but the training loss beyond 100 points."""
        out = self.to_dict()
        tl = out.get("train_loss") or []
        if len(tl) > 100:
            stride = math.ceil(len(tl) / 100)
            out["train_loss"] = tl[::stride] + ([tl[-1]] if (len(tl) - 1) % stride else [])
        return out

    @property
    def init_loss(self) -> float:
        """Validation bits per byte at step 0 (inf when the run was never evaluated)."""
        return float(self.curve[0]["val_bpb"]) if self.curve else math.inf

    @property
    def loss(self) -> float:
        """The run's score: its final bits per byte, capped at its loss at initialisation; a diverged
        or unfinished run counts as its loss at initialisation (Wortsman et al. 2023, Section 3.2).
        The one place a run is scored."""
        if self.diverged or self.value is None or not math.isfinite(self.value):
            return self.init_loss
        return min(self.value, self.init_loss)

    @property
    def finished(self) -> bool:
        """Trained to the end without diverging: its throughput means something."""
        return not self.diverged and bool(self.tokens_per_s)

    def outcome(self) -> str:
        """'diverged at step 40', 'pruned at step 100: val 3.1234 bits/byte' or 'val 3.1234 bits/byte'."""
        if self.diverged:
            return f"diverged at step {self.diverged_step}"
        val = f"val {self.curve[-1]['val_bpb'] if self.pruned else self.value:.4f} bits/byte"
        return f"pruned at step {self.steps}: {val}" if self.pruned else val


@dataclass
class ArchRecord:
    """One architecture's evaluation: what a trial stores, and what ``runs/<arch_id>/arch.json``
    holds so that a result outlives a storage that was down when it finished."""

    arch_id: str
    label: str
    baseline: str | None = None
    placement: dict = field(default_factory=dict)
    sites: str = ""
    state: str = "COMPLETE"  # the Optuna trial state: COMPLETE or PRUNED
    values: list[float] | None = None
    score: dict | None = None  # normsearch.scoring.Score.to_dict(), the objective as the sampler saw it
    params: dict = field(default_factory=dict)
    distributions: dict = field(default_factory=dict)  # name -> Optuna's distribution JSON
    runs: list[str] = field(default_factory=list)  # run keys, in training order
    trial_number: int | None = None
    reused_from: int | None = None  # the trial whose result a repeated proposal took
    proposal: int | None = None  # a searched architecture's proposal number (search.reproducible)

    # -- the trial's user attributes -------------------------------------------------------------

    def identity_attrs(self) -> dict[str, Any]:
        """What a trial carries as soon as its architecture is known."""
        out = {A_ARCH: self.arch_id, A_LABEL: self.label, A_PLACEMENT: self.placement, A_SITES: self.sites}
        if self.proposal is not None:
            out[A_PROPOSAL] = self.proposal
        return out

    def result_attrs(self) -> dict[str, Any]:
        """What a trial carries once evaluated."""
        out = {A_SCORE: self.score, A_RUNS: self.runs}
        if self.reused_from is not None:
            out[A_REUSED] = self.reused_from
        return out

    def to_attrs(self) -> dict[str, Any]:
        out = {**self.identity_attrs(), **self.result_attrs()}
        if self.baseline:
            out[A_BASELINE] = self.baseline
        return out

    @classmethod
    def from_trial(cls, trial) -> ArchRecord:
        """From a trial (an Optuna ``FrozenTrial`` or anything with ``number``, ``state``, ``values``,
        ``params`` and ``user_attrs``)."""
        ua = trial.user_attrs
        base = ua.get(A_BASELINE)
        return cls(
            arch_id=ua.get(A_ARCH) or "", label=base or ua.get(A_LABEL) or f"t{trial.number}", baseline=base,
            placement=ua.get(A_PLACEMENT) or {}, sites=ua.get(A_SITES) or "", state=trial.state.name,
            values=list(trial.values) if trial.values is not None else None, score=ua.get(A_SCORE),
            params=dict(trial.params), runs=list(ua.get(A_RUNS) or run_keys(ua)), trial_number=trial.number,
            reused_from=ua.get(A_REUSED), proposal=ua.get(A_PROPOSAL),
        )

    # -- arch.json -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("reused_from")
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArchRecord:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


def run_keys(user_attrs: dict) -> list[str]:
    return [k for k in user_attrs if k.startswith(RUN_PREFIX)]


def trial_runs(trial) -> list[RunResult]:
    """The runs stored with a trial, in training order."""
    ua = trial.user_attrs
    keys = ua.get(A_RUNS) or run_keys(ua)
    return [RunResult.from_dict(ua[k]) for k in keys if isinstance(ua.get(k), dict)]


def jsonable(x: Any) -> Any:
    """``x`` as plain JSON data, the form the reports' JSON files are written in: text keys, lists for
    tuples, Python numbers for numpy's scalars (numpy is not imported here), and null for a NaN or an
    infinity."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0:
        x = x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x
