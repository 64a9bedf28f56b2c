"""Ranking: rows per architecture, confidence intervals and paired tests against scipy, divergence,
best learning rate and sensitivity by hand, reused trials, running and failed trials, one seed.

The synthetic study here (``build_study``) is also the one tests/test_report.py reports on."""

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from normsearch.baselines import baseline
from normsearch.ranking import rank
from normsearch.records import RunResult
from normsearch.scoring import score_runs
from normsearch.space import parse_space

L = 2
INIT = 8.0  # every run's loss at initialisation
LRS = (1e-3, 3e-3)
SPACE = {"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "attn_out": ["none", "norm"],
                                      "ffn_in": ["none", "norm"], "ffn_out": ["none", "norm"], "final": ["norm"]}}
D = None  # a diverged run

# label -> (space choices or a baseline name, {lr: final loss of seeds 0, 1, 2})
ARCHS = {
    "pre_ln": ("pre_ln", {1e-3: [2.10, 2.12, 2.08], 3e-3: [2.05, 2.07, 2.04]}),
    "peri_ln": ("peri_ln", {1e-3: [2.00, 2.03, 2.01], 3e-3: [1.98, 2.00, 1.99]}),
    "hybridnorm": ("hybridnorm", {1e-3: [2.02, 2.04, 2.00], 3e-3: [1.95, D, 1.97]}),  # outside the space
    "t3": ({"attn_in": "norm", "attn_out": "norm", "ffn_in": "norm", "ffn_out": "none"},
           {1e-3: [1.95, 1.97, 1.96], 3e-3: [1.90, 1.93, 1.91]}),
    "t4": ({"attn_in": "none", "attn_out": "norm", "ffn_in": "none", "ffn_out": "norm"},
           {1e-3: [2.30, 2.25, 2.35], 3e-3: [2.50, 2.60, 2.55]}),
    "t5": ({"attn_in": "norm", "attn_out": "none", "ffn_in": "norm", "ffn_out": "norm"},
           {1e-3: [1.99, 2.01, 1.98], 3e-3: [1.97, 2.02, 1.96]}),
    "t6": ({"attn_in": "none", "attn_out": "none", "ffn_in": "none", "ffn_out": "none"},
           {1e-3: [3.00, 3.10, 2.90], 3e-3: [D, 3.20, 3.10]}),
}
GROWTH = {"pre_ln": 1.0, "peri_ln": 0.05, "hybridnorm": 0.2, "t3": 0.1, "t4": 0.3, "t5": 0.15, "t6": 2.0}


def space():
    return parse_space(SPACE)


def recipe(seeds=(0, 1, 2), lrs=LRS, objective="mean"):
    return {
        "name": "synth",
        "model": {"n_layers": L, "d_model": 32, "n_heads": 2, "context_length": 16, "vocab_size": 256},
        "data": {"corpus": "sotu", "tokenizer": "bytes"},
        "train": {"steps": 100, "batch_size": 4, "lr": list(lrs), "seeds": list(seeds)},
        "space": SPACE,
        "search": {"objective": objective, "sampler": "tpe", "trials": 6,
                   "baselines": ["pre_ln", "peri_ln", "hybridnorm"]},
    }


def placement_of(label):
    what = ARCHS[label][0]
    if isinstance(what, str):
        return baseline(what)
    sp = space()
    return sp.placement({f"site.{k}": v for k, v in what.items()} | {"site.final": "norm"})


def params_of(label):
    sp = space()
    what = ARCHS[label][0]
    if isinstance(what, str):
        return sp.params_of(baseline(what), L)  # None outside the space
    return {f"site.{k}": v for k, v in what.items()} | {"site.final": "norm"}


def make_run(label, seed, lr, value, pruned=False):
    p = placement_of(label)
    diverged = value is None
    g = GROWTH[label]
    steps = [0, 50] if diverged or pruned else [0, 50, 100]
    vals = {0: INIT, 50: 6.0 if diverged else (INIT + (value or 0)) / 2, 100: value}
    curve = [{"step": s, "val_bpb": vals[s], "train_loss": vals[s] * 0.7} for s in steps]
    diags = [{"step": s, "resid_rms": [1.0 + g * i * (1 + s / 100) for i in range(L + 1)],
              "grad_norm": [0.5 + g * (L - i) * (1 - s / 200) for i in range(L)], "max_logit": [3.0 * (1 + g * s / 50) - i for i in range(L)],
              "gains": {}, "alphas": {}} for s in steps]
    n_norm = 32 * len(p.resolve(L).present_sites())
    return {
        "arch_id": p.arch_id(L), "label": label, "placement": p.to_dict(), "n_layers": L, "seed": seed, "lr": lr,
        "value": None if diverged else value, "metric": "val_bpb", "diverged": diverged,
        "diverged_step": 60 if diverged else None, "diverged_reason": "train loss is NaN" if diverged else None,
        "pruned": pruned, "spikes": 0, "steps": 60 if diverged else (50 if pruned else 100), "curve": curve,
        "train_loss": [[s, vals[s] * 0.7] for s in steps], "diagnostics": diags, "wall_time": 10.0,
        "tokens_per_s": 1000.0 + 100 * list(ARCHS).index(label), "n_params": 10_000 + n_norm, "n_norm_params": n_norm,
        "precision": "32-true", "kernels": "triton" if label == "t5" else "torch",
        "triton_version": "3.2.0" if label == "t5" else None, "device": "cpu", "unigram_bpb": 4.0,
    }


def runs_of(label, seeds, lrs):
    table = ARCHS[label][1]
    return [make_run(label, s, lr, table[lr][s]) for lr in lrs for s in seeds]


def _attrs(label, runs, trial_number):
    p = placement_of(label)
    is_base = isinstance(ARCHS[label][0], str)
    keys = [f"run:s{r['seed']}:lr{r['lr']:g}" for r in runs]
    attrs = {"arch_id": p.arch_id(L), "label": label, "placement": p.to_dict(), "sites": p.resolve(L).describe(),
             "worker": "host:1", "runs": keys}
    if is_base:
        attrs["baseline"] = label
    attrs.update(dict(zip(keys, runs)))
    return attrs


def _dists(params):
    sp = space()
    return {k: CategoricalDistribution(list(sp.distributions()[k])) for k in params}


def build_study(seeds=(0, 1, 2), lrs=LRS, running=False, objective="mean", storage=None, only=None):
    """Trials 0-2 the baselines, 3-6 found placements, 7 repeats t3 (reused), 8 pruned, 9 failed,
    10 repeats the peri_ln network as a searched trial, 11 (``running``) is still training.
    ``only``: just these architectures (no repeats, pruned or failed trials)."""
    study = optuna.create_study(study_name="synth", storage=storage or optuna.storages.InMemoryStorage())
    study.set_user_attr("recipe", recipe(seeds, lrs, objective))
    done = {}
    for label in only or ARCHS:
        runs = runs_of(label, seeds, lrs)
        score = score_runs([RunResult.from_dict(r) for r in runs], objective)
        attrs = _attrs(label, runs, len(done))
        attrs["score"] = score.to_dict()
        params = params_of(label) or {}
        study.add_trial(create_trial(value=score.value, params=params, distributions=_dists(params), user_attrs=attrs))
        done[label] = (study.get_trials()[-1], score, params)

    def reuse(label, new_label):
        t, score, params = done[label]
        attrs = {k: v for k, v in t.user_attrs.items() if not k.startswith("run:")}
        attrs.pop("baseline", None)
        attrs.update({"label": new_label, "reused_from": t.number})
        study.add_trial(create_trial(value=score.value, params=params, distributions=_dists(params), user_attrs=attrs))

    if only is not None:
        return study
    reuse("t3", "t7")
    pruned_choice = {"site.attn_in": "none", "site.attn_out": "none", "site.ffn_in": "norm", "site.ffn_out": "norm",
                     "site.final": "norm"}
    p = space().placement(pruned_choice)
    run = make_run("t4", seeds[0], lrs[0], 3.5, pruned=True) | {"arch_id": p.arch_id(L), "label": "t8",
                                                                 "placement": p.to_dict()}
    study.add_trial(create_trial(
        state=TrialState.PRUNED, params=pruned_choice, distributions=_dists(pruned_choice),
        user_attrs={"arch_id": p.arch_id(L), "label": "t8", "placement": p.to_dict(),
                    "sites": p.resolve(L).describe(), "runs": ["run:s0:lr0.001"], "run:s0:lr0.001": run}))
    study.add_trial(create_trial(state=TrialState.FAIL, user_attrs={"label": "t9", "failure": "error: RuntimeError: boom"}))
    reuse("peri_ln", "t10")
    if running:
        p = space().placement({"site.attn_in": "norm", "site.attn_out": "none", "site.ffn_in": "none",
                               "site.ffn_out": "norm", "site.final": "norm"})
        run = make_run("t5", seeds[0], lrs[0], 2.5) | {"arch_id": p.arch_id(L), "label": "t11"}
        study.add_trial(create_trial(state=TrialState.RUNNING, user_attrs={
            "arch_id": p.arch_id(L), "label": "t11", "placement": p.to_dict(), "sites": p.resolve(L).describe(),
            "run:s0:lr0.001": run}))
    return study


# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranking():
    return rank(build_study())


def final(label, lr, seeds=(0, 1, 2)):
    """A run's loss as the score counts it: a diverged run is its loss at initialisation."""
    return [INIT if ARCHS[label][1][lr][s] is None else ARCHS[label][1][lr][s] for s in seeds]


def test_rows_are_ranked_by_score_one_per_architecture(ranking):
    ranked = [r.label for r in ranking.ranked]
    assert ranked == ["t3", "t5", "peri_ln", "hybridnorm", "pre_ln", "t4", "t6"]
    assert [r.rank for r in ranking.ranked] == list(range(1, 8))
    assert len({r.arch_id for r in ranking.rows}) == len(ranking.rows) == 8  # + the pruned t8
    pruned = ranking.row("t8")
    assert pruned.rank is None and pruned.state == "PRUNED" and pruned.score_mean is None and pruned.n_runs == 1
    assert ranking.rows[-1] is pruned
    base = {r.label for r in ranking.rows if r.is_baseline}
    assert base == {"pre_ln", "peri_ln", "hybridnorm"}
    assert ranking.row("t3").sites == "ai ao fi | fin  [rmsnorm]"
    assert ranking.row("t3").params["site.ffn_out"] == "none" and ranking.row("hybridnorm").params == {}


def test_reused_trials_merge_into_their_architecture(ranking):
    t3 = ranking.row("t3")
    assert t3.trials == [3, 7] and t3.n_runs == 6  # t7 repeated t3's network: one row, runs counted once
    peri = ranking.row("peri_ln")
    assert peri.trials == [1, 10] and peri.is_baseline  # a searched repeat of a baseline keeps its name
    assert ranking.row("t7") is None and ranking.row("t10") is None
    reused = [h for h in ranking.history if h.reused]
    assert [(h.number, h.label) for h in reused] == [(7, "t3"), (10, "peri_ln")]


def chosen(label, lrs=LRS, seeds=(0, 1, 2)):
    """The learning rate the ranking must choose, by hand: fewest failed runs, then the lowest mean
    over the successful ones; and those successful losses."""
    def key(lr):
        v = [ARCHS[label][1][lr][s] for s in seeds]
        ok = [x for x in v if x is not None]
        return (len(v) - len(ok), sum(ok) / len(ok), lr)

    lr = min(lrs, key=key)
    return lr, {s: ARCHS[label][1][lr][s] for s in seeds if ARCHS[label][1][lr][s] is not None}


def test_hurdle_order_best_lr_and_scores_by_hand(ranking):
    expected = sorted(ARCHS, key=lambda a: sum(chosen(a)[1].values()) / len(chosen(a)[1]))
    assert [r.label for r in ranking.ranked] == expected
    for r in ranking.ranked:
        lr, losses = chosen(r.label)
        assert r.best_lr == lr and r.seeds == pytest.approx(losses) and r.n_seeds == len(losses)
        assert r.score_mean == pytest.approx(sum(losses.values()) / len(losses))
        assert r.ci_low < r.score_mean < r.ci_high and r.ci_method == "per-arch"
        assert r.n_failed == 0 and not r.fails_at_best_lr  # every architecture has a clean learning rate
    h = ranking.row("hybridnorm")  # 3e-3 has the lower mean but a diverged seed: 1e-3 is chosen
    assert h.best_lr == 1e-3 and h.score_mean == pytest.approx(2.02)
    assert h.per_lr == {1e-3: pytest.approx(2.02), 3e-3: pytest.approx((1.95 + 1.97) / 2)}  # successful runs only
    at3 = next(p for p in h.lr_points if p.lr == 3e-3)
    assert (at3.n_runs, at3.n_diverged, at3.n_failed) == (3, 1, 1) and at3.failure_ci_high > 0.5


def test_intervals_are_the_statistics_packages_over_the_chosen_runs(ranking):
    from normsearch.stats import VARIANCE_METHOD, interval, variance_fit

    samples = {r.label: r.seeds for r in ranking.ranked}
    fit = variance_fit(samples)
    assert ranking.judgement.variance_method == VARIANCE_METHOD
    assert ranking.judgement.seed_sd == pytest.approx({a: sd for a, sd in fit.sd.items() if sd is not None})
    for r in ranking.ranked:
        i = interval(samples, r.label)
        assert (r.ci_low, r.ci_high) == (pytest.approx(i.ci_low), pytest.approx(i.ci_high))
    assert sum(r.p_best for r in ranking.ranked) == pytest.approx(1.0)
    assert ranking.ranked[0].p_best > 0.5 and all(r.rank_low <= r.rank <= r.rank_high for r in ranking.ranked)


def test_old_lr_sensitivity_is_kept_over_successful_runs(ranking):
    """Wortsman et al.'s sensitivity, kept in the rows (not the report) for old readers, now over the
    successful runs' means (no failed run enters it as its loss at initialisation)."""
    h = ranking.row("hybridnorm")
    L1, L3 = h.per_lr[1e-3], h.per_lr[3e-3]
    assert h.lr_sensitivity == pytest.approx((L1 + L3) / 2 - min(L1, L3))


def test_diverged_runs_are_counted(ranking):
    assert ranking.row("hybridnorm").n_diverged == 1 and ranking.row("t6").n_diverged == 1
    assert ranking.row("t3").n_diverged == 0
    assert sum(r.n_diverged for r in ranking.rows) == 2


def test_comparisons_are_one_holm_family_with_verdicts(ranking):
    from statsmodels.stats.multitest import multipletests

    assert ranking.against == ["peri_ln", "hybridnorm"]
    comps = [c for r in ranking.ranked for c in r.comparisons]
    assert ranking.judgement.n_comparisons == len(comps) == 6 + 5  # peri_ln twice would be the same pair
    holm = multipletests([c.p_value for c in comps], method="holm")[1]
    bh = multipletests([c.p_value for c in comps], method="fdr_bh")[1]
    for c, h, q in zip(comps, holm, bh):
        assert c.p_holm == pytest.approx(h) and c.q_bh == pytest.approx(q)
        assert c.verdict in ("better", "worse", "equivalent", "undecided")
        assert (c.verdict in ("better", "worse")) == (c.p_holm < 0.05)
        assert (c.seeds_needed is not None) == (c.verdict == "undecided" and c.seeds_needed is not None)
    # t3's seeds spread 0.015 and peri_ln's 0.010: Welch on their own SDs claims the 0.077 gap (Holm p 0.03);
    # an SD pooled with t6's 0.1 and t4's 0.05 (what the old equal-variance pre-test let through) left it undecided
    t3 = ranking.row("t3").comparison("peri_ln")
    assert t3.diff == pytest.approx((1.90 + 1.93 + 1.91) / 3 - 1.99) and t3.verdict == "better"
    assert t3.p_improve > 0.95 and t3.seeds_needed is None
    t5 = ranking.row("t5").comparison("peri_ln")  # 0.007 apart, t5's seeds spread 0.03: undecided
    assert t5.verdict == "undecided" and t5.seeds_needed > 3 and t5.margin_equivalent > abs(t5.diff)
    t4 = ranking.row("t4").comparison("hybridnorm")
    assert t4.verdict == "worse" and t4.diff == pytest.approx(2.30 - 2.02)
    peri = ranking.row("peri_ln")
    assert peri.comparison("peri_ln") is None and peri.comparison("hybridnorm") is None
    assert ranking.row("hybridnorm").comparison("peri_ln") is not None  # two baselines are compared once
    assert ranking.row("t8").comparisons == []


def test_against_missing_baseline_and_duplicates():
    r = rank(build_study(), against=["peri_ln", "peri_ln", "post_ln", "pre_ln", "t5"])
    assert r.against == ["peri_ln", "post_ln", "pre_ln", "t5"] and r.missing_against == ["post_ln"]
    assert [c.against for c in r.row("t3").comparisons] == ["peri_ln", "pre_ln", "t5"]
    assert r.row("t5").comparison("t5") is None  # any finished row can be compared with, never itself


def test_a_required_against_that_the_study_does_not_have_is_an_error():
    """The names the user gave (``required_against``) must be architectures of the study; the default
    ones (``against``) that are not stay skipped. One the study has but did not rank (pruned) is kept
    and listed as missing, as before."""
    from normsearch.errors import NormsearchError

    r = rank(build_study(), against=["post_ln", "peri_ln"], required_against=["t5", "t8"])
    assert r.against == ["post_ln", "peri_ln", "t5", "t8"] and r.missing_against == ["post_ln", "t8"]
    assert [c.against for c in r.row("t3").comparisons] == ["peri_ln", "t5"]
    with pytest.raises(NormsearchError, match=r"--against 'peri_lm': study 'synth' has no architecture of that "
                                              r"name \(did you mean 'peri_ln' or 'pre_ln'\?\)"):
        rank(build_study(), required_against=["t5", "peri_lm"])
    with pytest.raises(NormsearchError) as e:
        rank(build_study(), required_against=["qk_everywhere"])
    # no close name: the baselines, then one label per other architecture (not the reused t7 and t10, nor the
    # failed t9; the pruned t8 is an architecture of the study)
    assert str(e.value).endswith("(its baselines: pre_ln, peri_ln, hybridnorm; its other architectures: "
                                 "t3, t4, t5, t6, t8)")


def test_one_seed_gives_no_interval_and_no_comparison():
    r = rank(build_study(seeds=(0,)))
    t3 = r.row("t3")
    assert t3.n_seeds == 1 and t3.ci_low is None and t3.ci_high is None and t3.score_mean == pytest.approx(1.90)
    c = t3.comparison("peri_ln")
    assert c.p_value is None and c.verdict == "undecided"


def test_single_learning_rate_has_no_basin_and_no_sensitivity():
    r = rank(build_study(lrs=(1e-3,)))
    assert all(row.lr_sensitivity is None and row.lr_basin is None for row in r.ranked)
    assert r.row("t3").best_lr == 1e-3


def test_running_study_is_flagged_and_failures_listed():
    r = rank(build_study(running=True))
    assert not r.finished and r.running == 1
    t = r.running_trials[0]
    assert len(r.running_trials) == 1 and (t.number, t.label, t.runs_done, t.runs_total) == (11, "t11", 1, 6)
    assert r.row("t11") is None  # not ranked while it trains
    assert [(f.number, f.failure) for f in r.failures] == [(9, "error: RuntimeError: boom")]
    assert r.n_trials == {"COMPLETE": 9, "PRUNED": 1, "FAIL": 1, "RUNNING": 1}
    assert rank(build_study()).finished


def test_the_sampler_objective_does_not_change_the_ranking():
    """`robust` is what the sampler optimised; the ranking is the hurdle order either way."""
    r = rank(build_study(), objective="robust")
    assert r.objective == "robust"
    assert [x.label for x in r.ranked] == [x.label for x in rank(build_study()).ranked]


def test_cost_counts_every_stored_run_once():
    r = rank(build_study(running=True))
    assert r.cost.runs == 7 * 6 + 1 + 1  # seven architectures, the pruned run, the running one
    assert r.cost.wall_time_s == pytest.approx(10.0 * r.cost.runs)
    assert r.cost.tokens_per_run == 100 * 4 * 16


def test_json_safe_rows(ranking):
    d = ranking.row("hybridnorm").to_dict()
    assert "runs" not in d and d["seeds"] == {"0": pytest.approx(2.02), "1": pytest.approx(2.04),
                                               "2": pytest.approx(2.00)}
    assert d["comparisons"][0]["against"] == "peri_ln" and "sd_arch" not in d["comparisons"][0]
    assert math.isfinite(d["score_mean"])
    for key in ("n_failed", "failure_rate", "failure_ci_low", "failure_ci_high", "p_best", "rank_low", "rank_high"):
        assert key in d
    assert {"p_holm", "q_bh", "p_improve", "seeds_needed", "verdict"} <= set(d["comparisons"][0])


def test_sqlite_study_and_results_folder(tmp_path):
    """The same study in SQLite ranks the same."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    build_study(storage=url)
    r = rank(optuna.load_study(study_name="synth", storage=url))
    assert [x.label for x in r.ranked] == [x.label for x in rank(build_study()).ranked]


def test_p_values_read_as_sentences():
    from normsearch.ranking import format_p

    assert format_p(0.0361) == "p = 0.036" and format_p(0.0004) == "p < 0.001" and format_p(None) == "no p-value"
