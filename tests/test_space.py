"""The search space on its own: its points, the inverse ``params_of``, and the arch ids of every
shipped space pinned to the values they had before the restructuring (commit 99392a7)."""

import hashlib
import itertools
import random
from pathlib import Path

import pytest

from normsearch.baselines import BASELINES, baseline
from normsearch.errors import NormsearchError
from normsearch.space import load_space, parse_space

SPACES = Path(__file__).resolve().parents[1] / "search_spaces"

# sha256 over the arch ids of the space's points (all of them, or 300 drawn with random.Random(0)
# from the first 3000 of the grid), as computed at commit 99392a7
PINNED = {
    ("quick.yaml", 4): "5936a4252305f95f", ("quick.yaml", 12): "e7114dc318cfd3f1",
    ("sites.yaml", 4): "3b057f11c583249d", ("sites.yaml", 12): "459fb51726f60be5",
    ("depth.yaml", 4): "a3413bc544966845", ("depth.yaml", 12): "85ed9245e8131a5c",
    ("sites-kinds.yaml", 4): "3f800c56577210b1", ("sites-kinds.yaml", 12): "e5b0fc65c256657e",
}


def points(sp):
    pts = list(itertools.islice(sp.grid(), 0, 3000))
    return pts if sp.size() <= 3000 else random.Random(0).sample(pts, 300)


@pytest.mark.parametrize("name,n_layers", sorted(PINNED))
def test_every_point_of_the_shipped_spaces_keeps_its_arch_id(name, n_layers):
    sp = load_space(name, SPACES)
    h = hashlib.sha256()
    for v in points(sp):
        h.update(sp.placement(v).arch_id(n_layers).encode())
    assert h.hexdigest()[:16] == PINNED[(name, n_layers)]


@pytest.mark.parametrize("name", ["quick.yaml", "sites.yaml", "depth.yaml", "sites-kinds.yaml"])
def test_params_of_inverts_placement(name):
    """For every point v: params_of(placement(v)) is a point of the same network, and v itself
    whenever v is the space's only spelling of that network."""
    sp = load_space(name, SPACES)
    L = 4
    by_arch: dict[str, list[dict]] = {}
    pts = points(sp)
    for v in pts:
        by_arch.setdefault(sp.placement(v).arch_id(L), []).append(v)
    for v in pts:
        p = sp.placement(v)
        back = sp.params_of(p, L)
        assert back is not None, v
        assert sp.placement(back).arch_id(L) == p.arch_id(L)
        if len(by_arch[p.arch_id(L)]) == 1 and sp.size() == len(pts):
            assert back == v


def test_grid_size_matches_size_and_points_are_distinct_settings():
    sp = load_space("quick.yaml", SPACES)
    grid = list(sp.grid())
    assert len(grid) == sp.size() == 64
    assert len({tuple(sorted(v.items())) for v in grid}) == 64


def test_baselines_inside_a_space_are_points_of_it_and_others_are_not():
    sp = parse_space({"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "ffn_in": ["none", "norm"],
                                                   "attn_post": ["none", "norm"], "ffn_post": ["none", "norm"],
                                                   "final": ["none", "norm"]}})
    assert sp.params_of(baseline("pre_ln"), 4) == {"site.attn_in": "norm", "site.ffn_in": "norm",
                                                   "site.attn_post": "none", "site.ffn_post": "none",
                                                   "site.final": "norm"}
    assert sp.params_of(baseline("post_ln"), 4)["site.attn_post"] == "norm"
    assert sp.params_of(baseline("peri_ln"), 4) is None  # attn_out is not a site of this space
    assert set(BASELINES) >= {"pre_ln", "post_ln", "peri_ln"}


def test_tied_sites_move_together():
    sp = parse_space({"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "ffn_in": ["none", "norm"]},
                      "tie": [["attn_in", "ffn_in"]]})
    assert list(sp.distributions()) == ["site.attn_in+ffn_in"]
    assert sp.size() == 2
    r = sp.placement({"site.attn_in+ffn_in": "norm"}).resolve(2)
    assert all({"attn_in", "ffn_in"} <= set(r.block(i)) for i in range(2))
    r = sp.placement({"site.attn_in+ffn_in": "none"}).resolve(2)
    assert not any(set(r.block(i)) & {"attn_in", "ffn_in"} for i in range(2))


def test_a_space_is_checked_against_the_depth():
    sp = load_space("depth.yaml", SPACES)
    with pytest.raises(NormsearchError, match="holds no layer"):
        sp.check_depth(1)


@pytest.mark.parametrize("bad,match", [
    ({"sites": {"atn_in": ["none", "norm"]}}, "atn_in"),
    ({"sites": {"attn_in": ["none", "sometimes"]}}, "sometimes"),
    ({"kind": "batchnorm", "sites": {"attn_in": ["none", "norm"]}}, "batchnorm"),
])
def test_bad_spaces_are_one_clear_error(bad, match):
    with pytest.raises(NormsearchError, match=match):
        parse_space(bad)
