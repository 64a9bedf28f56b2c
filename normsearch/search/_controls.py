"""Control proposals (``search.control: K``): K architectures drawn uniformly from the search space and
trained beside the sampler's proposals with the same runs, so that "did the search help?" can compare
the sampler's proposals with uniform draws made in the same study (:mod:`normsearch.stats.search_value`).

- **Draw.** Control j's parameters come from Optuna's ``RandomSampler`` seeded by (``search.seed``, j),
  through the space's own suggest calls, in a study of its own: a function of the recipe and j alone,
  whatever the workers' timing (the same placements with ``search.reproducible`` on or off). That is the
  distribution TPE's and GP's random start-up proposals are drawn from.
- **Interleaving.** Control j is queued (``enqueue_trial``: its parameters, the attribute ``control`` j,
  the label ``c<j>``) once the sampler has been asked for ``floor((j + 1) * T / (K + 1))`` proposals,
  T = ``search.trials``: the K controls cut the T proposals into K + 1 near-equal stretches (T 8, K 3:
  after proposals 2, 4 and 6). While a control is due and not queued, no fresh proposal is asked for.
- **On top.** They never count toward ``search.trials`` or toward TPE's and GP's start-up (a sampler's
  proposal that repeats a control's architecture does count: the sampler proposed it).
- **Unseen.** Under ``search.reproducible`` the sampler does not see them: proposal k is fitted on the
  baselines and earlier proposals alone (:mod:`._propose`), so the sampler's proposals are the same
  with or without controls and the controls measure that very search. With the rule off, the study's
  own sampler sees every finished trial, the controls too.

:func:`searched_proposals` reads a study's searched trials back for the analysis: each a control, a
uniform start-up proposal or a model-based one, in proposal order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import A_ARCH, A_BASELINE, A_CONTROL, A_LABEL, A_PROPOSAL, A_REUSED, A_STARTUP, control_label
from ..storage import retry

MAX_CONTROL_FAILURES = 3  # a control whose trials failed this often (errors, not interruptions) is given up
_TAG = 0x63  # "c": keeps control j's seed apart from proposal k's (normsearch.search._propose.proposal_seed)


def control_seed(seed: int, j: int) -> int:
    """The random sampler's seed for control j: (search.seed, j) mixed by NumPy's SeedSequence."""
    import numpy as np

    return int(np.random.SeedSequence([int(seed), int(j), _TAG]).generate_state(1)[0])


def control_params(recipe, j: int) -> dict:
    """Control j's parameters: one uniform draw from the recipe's space (a fresh study, a seeded
    ``RandomSampler``, the space's suggest calls)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=control_seed(recipe.search.seed, j)))
    trial = study.ask()
    recipe.space.suggest(trial)
    return dict(trial.params)


def control_slot(j: int, trials: int, control: int) -> int:
    """How many of the sampler's proposals are asked for before control j is queued."""
    return (j + 1) * trials // (control + 1)


def control_of(t) -> int | None:
    """A trial's control index j, or None for any other trial."""
    j = t.user_attrs.get(A_CONTROL)
    return None if j is None else int(j)


def due_control(recipe, trials, sampler_done: bool) -> int | None:
    """The control to queue now: the first j < K with no trial that is waiting, running or finished
    (nor one that failed ``MAX_CONTROL_FAILURES`` times), once its slot is reached or the sampler needs
    no more proposals; None when there is none."""
    from ._propose import Slots

    s = recipe.search
    if s.control <= 0 or recipe.space is None:
        return None
    mine: dict[int, list] = {}
    for t in trials:
        j = control_of(t)
        if j is not None:
            mine.setdefault(j, []).append(t)
    asked = None
    for j in range(s.control):
        ts = mine.get(j, [])
        if any(t.state.name != "FAIL" for t in ts) or len(ts) >= MAX_CONTROL_FAILURES:
            continue
        if asked is None:
            asked = Slots.read(trials).next_k
        return j if sampler_done or asked >= control_slot(j, s.trials, s.control) else None
    return None


def queue_control(search, j: int) -> None:
    """Queue control j: its parameters fixed, its index and label as attributes."""
    params = control_params(search.recipe, j)
    attrs = {A_CONTROL: j, A_LABEL: control_label(j)}
    retry(lambda: search.study.enqueue_trial(params, user_attrs=attrs), "enqueue a control proposal")


def controls_left(recipe, trials) -> int:
    """Controls of ``search.control`` with no finished trial (nor given up after repeated failures)."""
    s = recipe.search
    if s.control <= 0 or recipe.space is None:
        return 0
    done, failed = set(), {}
    for t in trials:
        j = control_of(t)
        if j is None:
            continue
        if t.state.name in ("COMPLETE", "PRUNED"):
            done.add(j)
        elif t.state.name == "FAIL":
            failed[j] = failed.get(j, 0) + 1
    return sum(1 for j in range(s.control) if j not in done and failed.get(j, 0) < MAX_CONTROL_FAILURES)


def unseen(visible: list, trials) -> list:
    """The trials a proposal sees (:meth:`._propose.Slots.visible`) as they would be without controls:
    a proposal that took a control's result because the control had drawn the same architecture first
    (and no baseline or earlier proposal had) would have trained it itself, so it loses its
    ``reused_from`` (the random start-up counts trained proposals only). The rest is unchanged: the
    result is the same either way, runs being deterministic."""
    import copy

    by_number = {t.number: t for t in trials}
    out = []
    for t in visible:
        src = by_number.get(t.user_attrs.get(A_REUSED, -1))
        if src is not None and control_of(src) is not None:
            arch = t.user_attrs.get(A_ARCH)
            earlier = any(u.number < t.number and control_of(u) is None and u.user_attrs.get(A_ARCH) == arch
                          and u.state.name != "FAIL" for u in trials if u.number != t.number)
            if not earlier:
                t = copy.copy(t)
                t.user_attrs = {k: v for k, v in t.user_attrs.items() if k != A_REUSED}
        out.append(t)
    return out


# --------------------------------------------------------------------------------------------------
# The search's proposals, read back for the analysis


@dataclass(frozen=True)
class Proposal:
    """One finished searched trial as the analysis sees it."""

    number: int  # the trial
    kind: str  # "control" | "startup" (the sampler's, drawn uniformly) | "model" (the sampler's, from its model)
    order: int  # a control: j; the sampler's: its proposal number k (in the order the proposals were asked)
    label: str
    inferred: bool = False  # start-up or not was worked out again (the study predates the recorded flag)


def searched_proposals(trials, recipe) -> list[Proposal]:
    """The study's finished control trials (one per j) and the sampler's finished proposals (one per
    proposal number; a repeat of an evaluated architecture counts, it was proposed), each with its
    kind. Whether a proposal was a start-up one is the ``startup`` attribute it was given when it was
    made; for a study made before that attribute, it is worked out again: under ``search.reproducible``
    from the slots the proposal saw, otherwise from the trials finished when it started. A sampler
    with no start-up (grid, NSGA-II) makes model-based proposals only; the random sampler, start-up
    ones only. Trials queued by hand and baselines are left out."""
    from ._propose import Slots
    from ._samplers import is_startup

    trials = sorted(trials, key=lambda t: t.number)
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and not t.user_attrs.get(A_BASELINE)]
    out: dict[tuple[str, int], Proposal] = {}
    slots = Slots.read(trials)
    s = recipe.search
    for t in finished:
        j = control_of(t)
        if j is not None:
            out.setdefault(("c", j), Proposal(t.number, "control", j, control_label(j)))
            continue
        k = slots.number_of.get(t.number)
        if k is None or ("t", k) in out:
            continue
        startup = t.user_attrs.get(A_STARTUP)
        inferred = startup is None
        if startup is None:
            if A_PROPOSAL in t.user_attrs and s.reproducible:
                seen = slots.visible(k, list(s.baselines), s.in_flight)
            else:
                start = getattr(t, "datetime_start", None)
                seen = [u for u in trials if start is not None and getattr(u, "datetime_complete", None) is not None
                        and u.datetime_complete <= start]
            startup = is_startup(recipe, seen) if seen is not None else None
        out[("t", k)] = Proposal(t.number, "startup" if startup else "model", k,
                                 t.user_attrs.get(A_LABEL) or f"t{t.number}", inferred)
    return sorted(out.values(), key=lambda p: (p.kind == "control", p.order))
