"""Racing a stage's seeds: what the next round adds, from the stage's ranking."""

from __future__ import annotations

from ..search import StudyHandle
from ._stage import Stage


def racing_round(handle: StudyHandle, stage: Stage, racing) -> dict:
    """What racing does next, from the stage's ranking: stop (why), or the seeds it adds. The
    contenders are the architectures whose 95% rank interval reaches the leader's; each gets its next
    fresh seed (the leader too: separating needs both sides), in order of P(best), as far as the
    budget allows. A round needs at least two runs (the leader and its closest challenger): with one
    run of the budget left, racing stops."""
    from ..ranking import rank

    spent = sum(len(r.get("added", [])) for r in stage.rounds)
    ranking = rank(handle, against=[])
    ranked = [r for r in ranking.ranked if r.rank is not None]
    if not ranked:
        return {"stop": "nothing ranked", "reason": "nothing", "spent": spent}
    leader = ranked[0]
    info = {"round": len(stage.rounds) + 1, "leader": leader.label, "p_best": leader.p_best,
            "rank_high": leader.rank_high, "spent": spent}
    if not leader.n_seeds:
        return {**info, "stop": "no architecture has a successful run to race on", "reason": "no_success"}
    if leader.p_best is not None and leader.p_best >= racing.p_best:
        return {**info, "stop": f"{leader.label} reached P(best) {leader.p_best:.2f} >= {racing.p_best:g}",
                "reason": "p_best"}
    contenders = [r for r in ranked if r.rank_low is not None and r.rank_low <= (leader.rank_high or 1)]
    if len(contenders) <= 1:
        return {**info, "stop": f"separated: no rank interval reaches {leader.label}'s", "reason": "separated"}
    left = racing.budget - spent
    if left < 2:
        rest = f"; the {left} run left cannot add a seed to both the leader and a challenger" if left > 0 else ""
        return {**info, "stop": f"budget spent ({spent} of {racing.budget} extra runs{rest})", "reason": "budget"}
    contenders.sort(key=lambda r: -(r.p_best or 0.0))
    seeds_of: dict[str, int] = {}
    for t in stage.tasks():
        seeds_of[t.label] = max([seeds_of.get(t.label, -1), *t.seeds])
    added = [[r.label, seeds_of[r.label] + 1] for r in contenders[:left]]
    return {**info, "contenders": [r.label for r in contenders], "added": added}
