"""Proposals that depend on the recipe, not on the workers' timing (``search.reproducible``).

Optuna's sampler proposes from the trials that happen to be finished when a worker asks, so two
runs of one command with several workers propose different placements (optuna #3056, #6062). Here
the proposals of a study are numbered k = 0, 1, 2, ... in the order they are asked, and:

- proposal k sees exactly the first ``B + k - N + 1`` *slots* of the study, where the slots are the
  recipe's B baselines in recipe order followed by the proposals in order, and N is
  ``search.in_flight``; so proposal k is made once proposals 0..k-N (and the baselines before them)
  are finished, never from a later one, and at most N proposals train at once;
- its sampler is a fresh one of the recipe's kind, seeded by (``search.seed``, k), fitted on those
  slots alone, in slot order (one trial per slot: a proposal that was retried counts once).

Proposal k is therefore a function of the seed, k and the results of slots fixed by k and N, and
the same with one worker or ten, local or on many machines (runs themselves are identical at equal
threads: :mod:`normsearch.train`). A worker whose next proposal would see an unfinished slot helps
train another's runs, or waits. The numbering is read from storage: a proposal is a trial that the
loop asked for with nothing queued (no fixed parameters, not a retry); a retry carries its number.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import A_ARCH, A_BASELINE, A_FAILED, A_PROPOSAL


def _kind(t) -> str:
    """'baseline', 'retry', 'proposal' (a fresh trial the loop asked for) or 'queued' (anything else)."""
    if t.user_attrs.get(A_BASELINE):
        return "baseline"
    if "failed_trial" in t.system_attrs or "restored" in t.system_attrs:
        return "retry"  # a retry, or a result stored again (from disk, or after it was taken for dead)
    if "fixed_params" in t.system_attrs:
        return "queued"
    return "proposal"


@dataclass
class Slots:
    """The study's trials by slot: ``baselines[name]`` and ``proposals[k]``, each a list of trials in
    number order (a slot has several when its trial was retried or a baseline queued twice)."""

    baselines: dict
    proposals: dict
    number_of: dict  # trial number -> proposal k
    next_k: int  # the number the next fresh proposal gets (the fresh proposals so far)

    @classmethod
    def read(cls, trials) -> "Slots":
        baselines: dict[str, list] = {}
        proposals: dict[int, list] = {}
        number_of: dict[int, int] = {}
        k = 0
        for t in sorted(trials, key=lambda t: t.number):
            kind = _kind(t)
            if kind == "baseline":
                baselines.setdefault(t.user_attrs[A_BASELINE], []).append(t)
                continue
            if kind == "proposal":
                j = k
                k += 1
            elif kind == "retry":
                j = t.user_attrs.get(A_PROPOSAL)
                if j is None:
                    j = number_of.get(t.system_attrs.get("failed_trial"))
                if j is None:
                    continue
            else:
                continue
            number_of[t.number] = int(j)
            proposals.setdefault(int(j), []).append(t)
        return cls(baselines, proposals, number_of, k)

    @staticmethod
    def outcome(trials: list):
        """The trial that stands for a slot: its first finished (complete or pruned) trial; a failure
        that nobody retries (none of its trials waiting or running); None while it is not decided."""
        done = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
        if done:
            return done[0]
        if trials and all(t.state.name == "FAIL" for t in trials):
            return trials[-1]
        return None

    def visible(self, k: int, baselines: list[str], in_flight: int):
        """The trials proposal k sees, in slot order, or None while one of them is not decided."""
        last = len(baselines) + k - in_flight  # the last slot it sees
        out = []
        for i, name in enumerate(baselines):
            if i > last:
                return out
            t = self.outcome(self.baselines.get(name, []))
            if t is None:
                return None
            out.append(t)
        for j in range(0, last - len(baselines) + 1):
            t = self.outcome(self.proposals.get(j, []))
            if t is None:
                return None
            out.append(t)
        return out

    def archs_before(self, k: int) -> list[str] | None:
        """The architectures of proposals 0..k-1 in order (a proposal that failed before its
        architecture was known gives none; one released as one too many gives ``SURPLUS``), or None
        while one is not known yet."""
        out = []
        for j in range(k):
            ts = self.proposals.get(j, [])
            arch = next((t.user_attrs.get(A_ARCH) for t in ts if t.user_attrs.get(A_ARCH)), None)
            if arch is not None:
                out.append(arch)
                continue
            last = self.outcome(ts)
            if last is None:
                return None
            if str(last.user_attrs.get(A_FAILED, "")).startswith("surplus"):
                out.append(SURPLUS)
        return out


SURPLUS = "<surplus>"  # a proposal released as one too many: every later one is too


def proposal_seed(seed: int, k: int) -> int:
    """The sampler's seed for proposal k: (search.seed, k) mixed by NumPy's SeedSequence."""
    import numpy as np

    return int(np.random.SeedSequence([int(seed), int(k)]).generate_state(1)[0])


def propose(recipe, k: int, visible: list, directions: list[str]) -> dict:
    """The parameters of proposal k: the recipe's sampler, seeded by k, fitted on ``visible`` alone."""
    import optuna

    from ._samplers import make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(recipe, proposal_seed(recipe.search.seed, k))
    study = optuna.create_study(directions=directions, sampler=sampler)
    for t in visible:
        study.add_trial(optuna.trial.create_trial(
            state=t.state, values=t.values if t.state.name == "COMPLETE" else None, params=t.params,
            distributions=t.distributions, user_attrs=dict(t.user_attrs), system_attrs=dict(t.system_attrs),
            intermediate_values=dict(t.intermediate_values)))
    trial = study.ask()
    recipe.space.suggest(trial)
    return dict(trial.params)


def replay_sampler(fallback):
    """The study's sampler under the rule: a trial's parameters are the ones :func:`propose` computed
    for it (``planned[number]``); a trial with no plan (none is expected) is sampled independently by
    ``fallback``."""
    import optuna

    class Replay(optuna.samplers.BaseSampler):
        def __init__(self):
            self.planned: dict[int, dict] = {}
            self.fallback = fallback

        # nothing is sampled relatively: Optuna does that when a trial is asked for, before its plan exists
        def infer_relative_search_space(self, study, trial):
            return {}

        def sample_relative(self, study, trial, search_space):
            return {}

        def sample_independent(self, study, trial, param_name, param_distribution):
            plan = self.planned.get(trial.number)
            if plan is None:
                return self.fallback.sample_independent(study, trial, param_name, param_distribution)
            return plan[param_name]

        def before_trial(self, study, trial):
            self.fallback.before_trial(study, trial)

        def after_trial(self, study, trial, state, values):
            self.planned.pop(trial.number, None)
            self.fallback.after_trial(study, trial, state, values)

        def reseed_rng(self):
            self.fallback.reseed_rng()

    return Replay()
