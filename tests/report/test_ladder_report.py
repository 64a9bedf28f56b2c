"""normsearch.report._ladder: ladder.md's cells for one rung's ranking (the ladder end to end is
tests/stages/test_ladder_stages.py's)."""

import copy

from test_ranking import build_study

from normsearch.ranking import rank
from normsearch.report._ladder import _count, lr_cells


def test_lr_cells_give_the_failures_at_the_chosen_lr_and_over_the_rung():
    ranking = rank(build_study())
    hyb = ranking.row("hybridnorm")  # 3e-3: one of three seeds diverged; chosen: 1e-3, where none failed
    assert lr_cells(hyb) == ("0/3", "1/6", "**0.001**, 0.003", True)
    t6 = ranking.row("t6")  # diverged once at 3e-3 as well, and stalls nowhere
    at_lr, over_all, lrs, edge = lr_cells(t6)
    assert over_all == f"{sum(p.n_failed for p in t6.lr_points)}/6" and lrs.count("**") == 2 and edge
    lone = copy.deepcopy(hyb)
    lone.lr_points = [p for p in lone.lr_points if p.lr == 1e-3]
    assert lr_cells(lone) == ("0/3", "0/3", "**0.001**", False)  # one learning rate: no end to be at
    unknown = copy.deepcopy(hyb)
    unknown.best_lr = None  # no chosen learning rate: every run of the rung counts
    assert lr_cells(unknown)[:3] == ("1/6", "1/6", "0.001, 0.003")


def test_counts_are_short():
    assert (_count(999), _count(41_056), _count(2_500_000)) == ("999", "41.1k", "2.5M")


def test_the_trained_sentence_names_the_parametrisation():
    """The mup and standard width ladders' reports read alike: the sentence now says which one each
    trained under (the rungs' recipe, where --recipe sets it), and the model line of a mup rung's report."""
    from types import SimpleNamespace

    from normsearch.config import ModelConfig
    from normsearch.report._ladder import _trained
    from normsearch.sections import TrainConfig

    train = TrainConfig(lr=[1e-3, 3.162e-3, 1e-2], lr_extend=2)
    parent = SimpleNamespace(model=ModelConfig(), train=train)
    rung = lambda p: SimpleNamespace(recipe=SimpleNamespace(model=ModelConfig(parametrization=p), train=train))  # noqa: E731
    mup = _trained(parent, None, [rung("mup")], "sweep")
    assert mup.startswith("under the mup parametrisation (base width 64), a sweep at every rung over"), mup
    assert _trained(parent, None, [rung("standard")], "sweep").startswith("under the standard parametrisation, a sweep")
