"""The recipe's typed sections besides ``model`` (:mod:`normsearch.config`) and ``data``
(:mod:`normsearch.data`): ``train``, ``search`` (with its ``racing``), ``report``, ``confirm`` and
``ladder``, each a frozen dataclass that checks its own values, and the checks of a seed and a learning
rate they share with the command line. :mod:`normsearch.recipe` reads a recipe file into them. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from . import _yaml
from .config import from_mapping
from .errors import NormsearchError, unknown


def seed_problem(seed, what: str = "seed") -> str | None:
    """Why ``seed`` is not a seed (a non-negative integer below 2**32), or None."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        return f"{what} must be an integer in [0, 2**32), not {seed!r}"
    return None


def lr_problem(lr, what: str = "learning rate") -> str | None:
    """Why ``lr`` is not a learning rate (a finite number > 0), or None."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        return f"{what} must be a finite number > 0, not {lr!r}"
    return None


@dataclass(frozen=True)
class TrainConfig:
    """One training run's budget and optimiser, identical for every placement of a study."""

    steps: int = 200
    batch_size: int = 16
    lr: list[float] = field(default_factory=lambda: [3e-3])  # one value, or a list to sweep
    seeds: list[int] = field(default_factory=lambda: [0])
    warmup: int = 20  # linear warmup steps
    schedule: Literal["cosine", "linear", "constant"] = "cosine"  # after warmup
    min_lr_ratio: float = 0.1  # the schedule ends at lr * min_lr_ratio
    weight_decay: float = 0.1  # on matrices and embeddings; on norm gains and biases only with gain_decay
    gain_decay: bool = False  # weight decay on every norm's gains and biases too (a placement may ask alone)
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # global norm; 0 turns clipping off
    eval_every: int = 50  # steps between validation evaluations (and diagnostics)
    # auto: bf16 on GPU; on CPU the faster here of fp32 and bf16 autocast, measured (normsearch._precision)
    precision: Literal["auto", "32-true", "bf16-mixed", "16-mixed"] = "auto"
    kernels: Literal["auto", "torch", "triton"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = None  # CPU threads for torch (default: torch's choice)
    diverge_factor: float = 1.5  # a train loss above this times the first loss means diverged
    spike_factor: float = 1.25  # a train loss above this times its running average counts as a spike
    strategy: Literal["auto", "ddp", "fsdp"] = "auto"  # a trial on several devices (GPU)
    devices: int = 1  # devices per trial
    compile: bool | Literal["auto"] = "auto"  # torch.compile the model; auto: on GPU only (see README)
    logger: Literal["none", "csv", "tensorboard", "wandb", "mlflow"] = "none"  # curves of every run, offline
    # the extending sweep: when an architecture's best learning rate is at an end of train.lr, one
    # more point beyond it (train.lr's own ratio between points), up to this many per architecture
    lr_extend: int = 0
    # refine the sweep around the chosen cell until a neighbour on each side is at most this many decades
    # away (normsearch.grid.next_points); None: no refinement
    lr_resolution: float | None = None
    # the tuned grid besides the learning rate (normsearch.grid): {init: [gpt, small, paper], warmup: [20, 60]};
    # every architecture is trained in every variant and scored at its own best cell
    grid: dict = field(default_factory=dict)

    def __post_init__(self):
        from .grid import grid_problem

        checks = [
            (self.steps >= 1, "train.steps must be >= 1"),
            (self.batch_size >= 1, "train.batch_size must be >= 1"),
            (isinstance(self.gain_decay, bool), f"train.gain_decay must be true or false, not {self.gain_decay!r}"),
            (len(self.lr) >= 1 and all(lr_problem(x) is None for x in self.lr),
             f"train.lr must be one or more finite numbers > 0, not {self.lr}"),
            (len(self.seeds) >= 1, "train.seeds must list at least one seed"),
            (all(seed_problem(x) is None for x in self.seeds),
             f"train.seeds must be integers in [0, 2**32), not {self.seeds}"),
            (len(set(self.seeds)) == len(self.seeds), "train.seeds has repeated seeds"),
            (len(set(self.lr)) == len(self.lr), "train.lr has repeated values"),
            (0 <= self.warmup <= self.steps, "train.warmup must be between 0 and train.steps"),
            (0 <= self.min_lr_ratio <= 1, "train.min_lr_ratio must be in [0, 1]"),
            (self.eval_every >= 1, "train.eval_every must be >= 1"),
            (self.grad_clip >= 0, "train.grad_clip must be >= 0"),
            (self.weight_decay >= 0, "train.weight_decay must be >= 0"),
            (self.diverge_factor > 1, "train.diverge_factor must be > 1"),
            (self.spike_factor > 1, "train.spike_factor must be > 1"),
            (self.devices >= 1, "train.devices must be >= 1"),
            (self.threads is None or self.threads >= 1, "train.threads must be >= 1"),
            (self.lr_extend >= 0, "train.lr_extend must be >= 0"),
            (self.lr_extend == 0 or len(self.lr) >= 2,
             "train.lr_extend needs a sweep of two or more learning rates (its ratio is the extension's step)"),
            (self.lr_resolution is None or (isinstance(self.lr_resolution, (int, float))
                                            and 0.01 <= self.lr_resolution <= 2),
             f"train.lr.resolution must be a number of decades in [0.01, 2] (0.25: a quarter decade), "
             f"not {self.lr_resolution!r}"),
            (self.lr_resolution is None or len(self.lr) >= 2,
             "train.lr.resolution needs a sweep of two or more learning rates to refine"),
            (grid_problem(self.grid, self.steps) is None, grid_problem(self.grid, self.steps)),
        ]
        for ok, msg in checks:
            if not ok:
                raise NormsearchError(msg)

    @property
    def lr_ratio(self) -> float | None:
        """The sweep's step: the geometric mean ratio between neighbouring learning rates."""
        lrs = sorted(self.lr)
        if len(lrs) < 2:
            return None
        return (lrs[-1] / lrs[0]) ** (1.0 / (len(lrs) - 1))

    @property
    def runs(self) -> list:
        """Every run of one architecture before the sweep refines (normsearch.grid.RunSpec: seed, lr,
        variant tag), in the order they are trained, as for a found placement (no ``init: paper``)."""
        from .grid import plan

        return plan(self)

    @property
    def n_variants(self) -> int:
        n = 1
        for values in self.grid.values():
            n *= len(values)
        return n


@dataclass(frozen=True)
class RacingConfig:
    """Racing the confirmation: seeds are added one at a time to the architectures whose rank
    interval overlaps the leader's, until they separate, the leader's P(best) reaches ``p_best``, or
    ``budget`` extra runs are spent."""

    budget: int = 12  # extra runs (one seed at one architecture's learning rate each), in all
    p_best: float = 0.95

    def __post_init__(self):
        if self.budget < 1:
            raise NormsearchError("search.racing.budget must be >= 1 (extra runs)")
        if not 0.5 < self.p_best < 1:
            raise NormsearchError(f"search.racing.p_best must be in (0.5, 1), not {self.p_best}")


@dataclass(frozen=True)
class ConfirmConfig:
    """The confirmation stage (``normsearch confirm``): the top placements and the baselines trained
    again on fresh seeds, each at the learning rate the search chose for it, scored on the test split."""

    top: int = 3  # found placements (not baselines), by the search's ranking
    # fresh seeds per architecture (racing may add more); auto: the fewest in [min_seeds, max_seeds] that give
    # the primary contrasts `power` at the effect the search saw, shrunk (normsearch.stages.confirm.design)
    seeds: int | Literal["auto"] = 3
    baselines: list[str] | None = None  # default: search.baselines
    test_bytes: int = 100_000  # the test split: at least this many bytes of text no validation window touches
    first_seed: int = 1000  # fresh seeds are first_seed, first_seed + 1, ...; none may be a search seed
    # the declared contrasts, "A vs B": labels, baseline names, `first` (the search's first found placement)
    # and `best_baseline` (the search's best baseline among the confirmed ones); tested apart, Holm among them
    primary: list[str] = field(default_factory=lambda: ["first vs best_baseline"])
    power: float = 0.8  # seeds: auto designs for this power
    min_seeds: int = 5
    max_seeds: int = 30

    def __post_init__(self):
        from .baselines import BASELINES

        if self.top < 0:
            raise NormsearchError("confirm.top must be >= 0")
        if self.seeds != "auto" and (isinstance(self.seeds, bool) or self.seeds < 2):
            raise NormsearchError("confirm.seeds must be >= 2 (a verdict needs a variance) or auto")
        if not 0.5 <= self.power < 1:
            raise NormsearchError(f"confirm.power must be in [0.5, 1), not {self.power!r}")
        if not 2 <= self.min_seeds <= self.max_seeds:
            raise NormsearchError(f"confirm needs 2 <= min_seeds <= max_seeds, not {self.min_seeds} and "
                                  f"{self.max_seeds}")
        for c in self.primary:
            if not isinstance(c, str) or len(c.split(" vs ")) != 2 or not all(x.strip() for x in c.split(" vs ")):
                raise NormsearchError(f"confirm.primary: {c!r} is not a contrast; write \"A vs B\" with labels, "
                                      f"baseline names, first or best_baseline, e.g. \"first vs best_baseline\"")
        if self.test_bytes < 1000:
            raise NormsearchError("confirm.test_bytes must be >= 1000")
        problem = seed_problem(self.first_seed, "confirm.first_seed")
        if problem:
            raise NormsearchError(problem)
        for b in self.baselines or []:
            if b not in BASELINES:
                raise NormsearchError(f"confirm.baselines: {unknown('baseline', b, BASELINES)}")

    @property
    def most_seeds(self) -> int:
        """The seeds per architecture at most (before racing): the fixed count, or ``max_seeds`` under auto."""
        return self.max_seeds if self.seeds == "auto" else self.seeds

    def seed_list(self, extra: int = 0, n: int | None = None) -> list[int]:
        """``n`` fresh seeds (default: the fixed count, or ``max_seeds`` under auto) and ``extra`` more."""
        return list(range(self.first_seed, self.first_seed + (n or self.most_seeds) + extra))


#: model settings a rung may change; anything else would change what the loss measures (data,
#: tokenizer, vocabulary, context: the windows it is scored on) and make rungs incomparable
RUNG_KEYS = ("n_layers", "d_model", "n_heads", "ffn_hidden", "mup_base_width")


def rung_problem(i: int, rung) -> str | None:
    """Why ``rung`` (ladder.rungs[i], model overrides) cannot be a rung, or None."""
    if not isinstance(rung, dict) or not rung:
        return f"ladder.rungs[{i}] must be a mapping of model settings, e.g. {{d_model: 128}}, not {rung!r}"
    for key in rung:
        if key in ("vocab_size", "context_length", "data", "tokenizer", "corpus"):
            return (f"ladder.rungs[{i}].{key}: rungs must share the data, tokenizer, vocabulary and context to be "
                    f"compared (their losses would measure different things); vary {', '.join(RUNG_KEYS[:4])}")
        if key not in RUNG_KEYS:
            return f"ladder.rungs[{i}]: {unknown('setting', key, RUNG_KEYS)}"
    return None


@dataclass(frozen=True)
class LadderConfig:
    """The scale ladder (``normsearch ladder``): the top placements and the baselines retrained at
    three or more model sizes, on fresh seeds, tokens growing with parameters."""

    # model overrides, smallest first; may be left to the command line (--rungs) or to the ladder already
    # stored with the study, but the ladder needs them by the time it runs
    rungs: list[dict] = field(default_factory=list)
    top: int = 2  # found placements, by the search's ranking
    baselines: list[str] | None = None  # default: search.baselines
    seeds: int = 2
    first_seed: int = 2000
    tokens_per_param: float | None = None  # training tokens per run = this x parameters; None: train.steps
    max_steps: int | None = None  # the cap on steps per run
    lr: Literal["auto", "sweep", "transfer"] = "auto"  # auto: transfer under mup along width alone, else sweep
    lr_extend: int | None = None  # the sweep's extension at each rung (default: train.lr_extend)
    lr_resolution: float | None = None  # the sweep's refinement at each rung, decades; 0: none (default: the search's)
    target: float | None = None  # extrapolate the order to this many parameters
    # a second ladder of the same study: its stages are ladder-<name>-<i> ("": the study's ladder, ladder-<i>)
    name: str = ""
    # recipe overrides every rung shares (section.key: value), e.g. the data and precision of a GPU ladder
    recipe: dict = field(default_factory=dict)

    def __post_init__(self):
        import re

        from .baselines import BASELINES

        if self.name and (not re.fullmatch(r"[a-z][a-z0-9-]*", self.name) or len(self.name) > 40):
            raise NormsearchError(f"ladder.name {self.name!r}: a lowercase word (letters, digits, '-'), starting "
                                  f"with a letter")
        if not isinstance(self.recipe, dict) or not all(isinstance(k, str) and "." in k for k in self.recipe):
            raise NormsearchError(f"ladder.recipe: a mapping of recipe overrides every rung shares (section.key: "
                                  f"value), e.g. {{train.precision: bf16-mixed}}, not {self.recipe!r}")
        if self.rungs and len(self.rungs) < 3:
            raise NormsearchError(f"ladder.rungs: give three or more rungs (model overrides, smallest first), not "
                                  f"{len(self.rungs)}")
        for i, rung in enumerate(self.rungs):
            problem = rung_problem(i, rung)
            if problem:
                raise NormsearchError(problem)
        if self.top < 0 or self.seeds < 1:
            raise NormsearchError("ladder.top must be >= 0 and ladder.seeds >= 1")
        for b in self.baselines or []:
            if b not in BASELINES:
                raise NormsearchError(f"ladder.baselines: {unknown('baseline', b, BASELINES)}")
        if self.tokens_per_param is not None and self.tokens_per_param <= 0:
            raise NormsearchError("ladder.tokens_per_param must be > 0")
        if self.lr_extend is not None and self.lr_extend < 0:
            raise NormsearchError("ladder.lr_extend must be >= 0")
        if self.lr_resolution is not None and self.lr_resolution < 0:
            raise NormsearchError("ladder.lr_resolution must be >= 0 decades (0: no refinement)")
        if self.max_steps is not None and self.max_steps < 1:
            raise NormsearchError("ladder.max_steps must be >= 1")
        if self.target is not None and self.target <= 0:
            raise NormsearchError("ladder.target must be a number of parameters > 0")
        problem = seed_problem(self.first_seed, "ladder.first_seed")
        if problem:
            raise NormsearchError(problem)


def ladder_config(data, section: str = "ladder") -> LadderConfig:
    """A ``ladder:`` section (or the command line's settings) as a LadderConfig. ``rungs`` must be a list:
    the typed-config reader would take a single mapping for a list of one, and a ladder of one rung
    is never what was meant."""
    rungs = data.get("rungs") if isinstance(data, dict) else None
    if rungs is not None and not isinstance(rungs, list):
        raise NormsearchError(f"{_yaml.where(data, 'rungs')}{section}.rungs must be a list of model overrides, "
                              f"smallest first, e.g. [{{n_layers: 2}}, {{n_layers: 4}}, {{n_layers: 8}}], not "
                              f"{rungs!r}")
    for i, rung in enumerate(rungs or []):
        problem = rung_problem(i, rung)
        if problem:
            raise NormsearchError(f"{_yaml.where(data, 'rungs')}{problem}")
    return from_mapping(LadderConfig, data, section)


@dataclass(frozen=True)
class SearchConfig:
    sampler: Literal["tpe", "gp", "random", "grid", "nsga2"] = "tpe"
    trials: int = 20  # searched architectures in total (baselines come on top)
    pruner: Literal["none", "median", "halving", "hyperband"] = "none"
    objective: Literal["mean", "robust"] = "mean"
    second_objective: Literal["none", "params", "throughput"] = "none"  # a Pareto search
    baselines: list[str] = field(default_factory=lambda: ["pre_ln", "post_ln", "peri_ln", "hybridnorm"])
    norm_kind: str = "rmsnorm"  # the kind of the baselines' norms
    seed: int = 0  # the sampler's seed
    startup_trials: int = 5  # TPE/GP: random trials before the model
    heartbeat: int = 60  # seconds between a running trial's heartbeats (RDB/journal storage)
    grace: int = 600  # a trial silent for this long is dead and is retried
    jobs: int | Literal["auto"] = "auto"  # local workers on the study (normsearch run --jobs)
    racing: RacingConfig | None = None  # race the confirmation's seeds (needs a confirm section)
    # proposals that depend on the recipe, not on the workers' timing (normsearch.search._propose): proposal k
    # sees the baselines and proposals 0..k-in_flight, so at most in_flight proposals train at once
    reproducible: bool = True
    in_flight: int = 4
    # control proposals: uniform draws from the space (seeded by search.seed and j), trained like the sampler's
    # proposals and interleaved among them, on top of search.trials (normsearch.search._controls)
    control: int = 0

    def __post_init__(self):
        from .baselines import BASELINES
        from .norms import NORM_KINDS

        if self.trials < 0:
            raise NormsearchError("search.trials must be >= 0")
        problem = seed_problem(self.seed, "search.seed")
        if problem:
            raise NormsearchError(problem)
        if self.startup_trials < 0:
            raise NormsearchError("search.startup_trials must be >= 0")
        if self.heartbeat < 1:
            raise NormsearchError("search.heartbeat must be >= 1 second")
        for b in self.baselines:
            if b not in BASELINES:
                raise NormsearchError(f"search.baselines: {unknown('baseline', b, BASELINES)}")
        if self.norm_kind not in NORM_KINDS:
            raise NormsearchError(f"search.norm_kind: {unknown('norm kind', self.norm_kind, NORM_KINDS)}")
        if self.sampler == "nsga2" and self.second_objective == "none":
            raise NormsearchError("search.sampler nsga2 is for two objectives; set search.second_objective")
        if self.pruner != "none" and self.second_objective != "none":
            raise NormsearchError("pruning is for one objective; set search.pruner: none with a second objective")
        if self.jobs != "auto" and self.jobs < 1:
            raise NormsearchError("search.jobs must be >= 1 or auto")
        if self.in_flight < 1:
            raise NormsearchError(f"search.in_flight must be >= 1 (proposals trained at once), not {self.in_flight}")
        if self.control < 0:
            raise NormsearchError(f"search.control must be >= 0 (uniform draws from the space, trained beside the "
                                  f"sampler's proposals; 0: none), not {self.control}")
        if self.grace <= 2 * self.heartbeat:
            raise NormsearchError("search.grace must be more than twice search.heartbeat")


@dataclass(frozen=True)
class ReportConfig:
    """How the report judges (docs/statistics.md). Not part of what a run measures: changing it never
    makes a study incomparable, and ``normsearch report`` reads it again each time."""

    margin: float = 0.02  # bits/byte: "equivalent" means both one-sided tests pass within +-margin
    alpha: float = 0.05  # familywise error of the claims (Holm) and level of the intervals
    plots: bool = True  # draw the PNG plots (false: tables and numbers alone, a second or more saved a plot)

    def __post_init__(self):
        if not (isinstance(self.margin, (int, float)) and math.isfinite(self.margin) and self.margin > 0):
            raise NormsearchError(f"report.margin must be a number > 0 (bits/byte), not {self.margin!r}")
        if not 0 < self.alpha < 0.5:
            raise NormsearchError(f"report.alpha must be in (0, 0.5), not {self.alpha!r}")


@dataclass(frozen=True)
class RobustnessConfig:
    """Recipe variants (``normsearch robustness``): the top placements and the baselines retrained under
    named variants of the recipe (normsearch.stages.robustness.VARIANTS, or ``define``d here), each a
    stage of the study, on fresh seeds, the learning rate swept in each."""

    variants: list[str] = field(default_factory=list)  # names, in order; empty: the default list
    define: dict = field(default_factory=dict)  # more variants: name -> {section.key: value}
    top: int = 2  # found placements, by the search's (confirmed) ranking
    baselines: list[str] | None = None  # default: search.baselines
    seeds: int = 3
    first_seed: int = 3000
    lr_extend: int | None = None  # the sweep's extension in each variant (default: train.lr_extend)
    lr_resolution: float | None = None  # its refinement, decades; 0: none (default: train.lr_resolution)

    def __post_init__(self):
        from .baselines import BASELINES

        if self.top < 0 or self.seeds < 1:
            raise NormsearchError("robustness.top must be >= 0 and robustness.seeds >= 1")
        for b in self.baselines or []:
            if b not in BASELINES:
                raise NormsearchError(f"robustness.baselines: {unknown('baseline', b, BASELINES)}")
        if self.lr_extend is not None and self.lr_extend < 0:
            raise NormsearchError("robustness.lr_extend must be >= 0")
        if self.lr_resolution is not None and self.lr_resolution < 0:
            raise NormsearchError("robustness.lr_resolution must be >= 0 decades (0: no refinement)")
        for name, overrides in self.define.items():
            if not isinstance(overrides, dict) or not all(isinstance(k, str) and "." in k for k in overrides):
                raise NormsearchError(f"robustness.define.{name}: a variant is a mapping of recipe overrides "
                                      f"(section.key: value), e.g. {{train.weight_decay: 0.3}}, not {overrides!r}")
        problem = seed_problem(self.first_seed, "robustness.first_seed")
        if problem:
            raise NormsearchError(problem)


@dataclass(frozen=True)
class AblateConfig:
    """A factorial between two architectures (``normsearch ablate``): every combination of the sites where
    ``between``'s A and B differ (or of ``sites``), each trained at A's chosen cell on fresh seeds and
    scored on the test split; ``init``: an init factor (A's and B's chosen inits, ``[swap]``, or two named
    ones); ``leave_one_out``: A with each single change instead of the factorial."""

    between: list[str] = field(default_factory=list)  # A (the reference: its chosen cell) and B
    sites: list[str] | None = None  # the factors; None: every site where A and B differ
    seeds: int = 3
    first_seed: int = 4000
    design: Literal["full", "half", "auto"] = "auto"  # auto: full up to 5 factors, else the half fraction
    init: list[str] | None = None  # None or [none]: no init factor; [swap]: A's and B's chosen inits; [a, b]
    leave_one_out: bool = False
    test_bytes: int | None = None  # default: confirm.test_bytes of the recipe, else 100,000

    def __post_init__(self):
        if len(self.between) != 2:
            raise NormsearchError(f"ablate.between names two architectures (A B), not {self.between!r}")
        if self.seeds < 2:
            raise NormsearchError("ablate.seeds must be >= 2 (each combination's own variance needs two runs)")
        if self.init is not None and not (self.init in (["swap"], ["none"]) or len(self.init) == 2):
            raise NormsearchError(f"ablate.init is swap, none or two inits (a,b), not {','.join(self.init)}")
        if self.test_bytes is not None and self.test_bytes < 1000:
            raise NormsearchError("ablate.test_bytes must be >= 1000")
        problem = seed_problem(self.first_seed, "ablate.first_seed")
        if problem:
            raise NormsearchError(problem)
