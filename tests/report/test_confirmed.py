"""normsearch.report._confirmed: the confirmation's verdicts beside the search's, and what racing did.
The synthetic study of tests/test_ranking.py stands in for both rankings."""

import copy

import optuna
import pytest
from test_ranking import build_study

from normsearch.ranking import rank
from normsearch.report._confirmed import _reason, confirmed_lines, racing_summary

INFO = {"settings": {"top": 2, "test_bytes": 50_000}, "seeds": [1000, 1001, 1002],
        "entries": [{"arch_id": "x", "baseline": None}]}


@pytest.fixture(scope="module")
def ranking():
    return rank(build_study())


def test_no_racing_no_summary(ranking):
    assert racing_summary({"stage": INFO}, ranking, 3) is None


def test_racing_summary_counts_the_added_runs_against_the_fixed_design(ranking):
    attrs = {"racing_round_0": {"added": [["a", 1003], ["b", 1003]]}, "racing_round_1": {"added": [["a", 1004]]},
             "racing_end": {"stop": "p_best 0.95 >= 0.9", "reason": "settled"}}
    s = racing_summary(attrs, ranking, 3)
    rows = [r for r in ranking.rows if r.runs]
    most = max(len({x.seed for x in r.runs}) for r in rows)
    assert s == {"rounds": 2, "extra_runs": 3, "stop": "p_best 0.95 >= 0.9", "reason": "settled",
                 "runs": sum(len(r.runs) for r in rows), "fixed_design_runs": len(rows) * most, "max_seeds": most}
    # a stage that is still racing: rounds but no end yet
    running = racing_summary({"racing_round_0": {"added": []}}, ranking, 3)
    assert running["rounds"] == 1 and running["stop"] is None and running["reason"] is None


@pytest.mark.parametrize("end, reason", [
    ({"stop": "budget of 6 runs spent", "reason": None}, "budget"),  # stored before the word was recorded
    ({"stop": "budget of 6 runs spent"}, "budget"),
    ({"stop": "P(best) 0.96", "reason": "settled"}, "settled"),
    ({"stop": "P(best) 0.96"}, None),
    ({}, None),
])
def test_why_racing_stopped_as_a_word(end, reason):
    assert _reason(end) == reason


def test_confirmed_lines_put_both_rankings_side_by_side(ranking):
    attrs = {"stage": INFO}
    lines = confirmed_lines(ranking, ranking, attrs, "confirm/report.md")
    text = "\n".join(lines)
    assert lines[0] == "## Confirmed verdicts (fresh seeds, test split)"
    assert "seeds that chose nothing (1000, 1001, 1002)" in text and "(50,000+ bytes)" in text
    assert "[confirm/report.md](confirm/report.md)" in text
    table = [x for x in lines if x.startswith("| ")]
    assert len(table) == 1 + len(ranking.ranked)  # the header and one line per confirmed architecture
    t3 = ranking.row("t3")
    assert table[1].startswith(f"| 1 | t3 | {t3.score_mean:.4f} [{t3.ci_low:.4f}, {t3.ci_high:.4f}] | {t3.n_seeds} |")
    assert table[1].endswith(f"| 0.003 | 1 | {t3.score_mean:.4f} [{t3.ci_low:.4f}, {t3.ci_high:.4f}] |")
    assert "(baseline)" in "\n".join(table)
    assert "- Confirmed, against `peri_ln`: **1 of 4 found placement(s) beat `peri_ln`** under Holm: t3" in text
    assert "- The search's first, **t3**, is also first on fresh seeds and the test split." in text
    assert "Racing" not in text and "Evaluation noise" not in text  # neither happened here


def test_the_evaluation_noise_is_compared_with_the_seed_noise(ranking):
    ranking = copy.deepcopy(ranking)
    for r in ranking.rows:
        for x in r.runs:
            x.test_se, x.test_windows = 0.001, 40
    text = "\n".join(confirmed_lines(ranking, ranking, {"stage": INFO}, "c.md"))
    assert "a test split of 40 windows" in text
    assert "**Evaluation noise**: the test split's own standard error (a bootstrap over its windows) is 0.0010" in text
    assert "the evaluation is small against seed noise" in text


def test_racing_is_said_and_a_budget_stop_is_not_a_saving(ranking):
    attrs = {"stage": INFO, "racing_round_0": {"added": [["a", 1003], ["b", 1003]]},
             "racing_end": {"stop": "budget of 2 runs spent", "reason": "budget"}}
    text = "\n".join(confirmed_lines(ranking, ranking, attrs, "c.md"))
    assert "**Racing** added 2 run(s) over 1 round(s)" in text and "it stopped: budget of 2 runs spent" in text
    assert "so that is not a saving at equal certainty" in text
    assert "the intervals and p-values are not adjusted for that" in text
    assert "and those racing added" in text


def test_a_confirmation_with_nothing_finished(ranking):
    empty = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    empty.set_user_attr("recipe", build_study().user_attrs["recipe"])
    lines = confirmed_lines(ranking, rank(empty), {"stage": INFO}, "c.md")
    assert lines[-2:] == ["The confirmation has no finished architecture yet.", ""]
