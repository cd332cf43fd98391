"""The second attention family: hierarchical, graph, attention on attention, adaptive (visual
sentinel) and the region self-attention refiner, each doing what it says on small cases."""

from __future__ import annotations

import pytest
import torch

from captioning.models import build_attention, build_decoder
from captioning.models.attention import sentinel_weight
from captioning.models.attention.graph import grid_neighbours, knn_neighbours
from captioning.models.attention.hierarchical import block_membership
from captioning.models.refiner import REFINERS, build_refiner

DQ, DK, DV = 12, 20, 8


def test_block_membership_pools_like_adaptive_pooling():
    even = block_membership(16, 2)  # 4x4 grid, 2x2 blocks of 2x2 cells
    assert even.shape == (4, 16) and (even.sum(1) == 4).all() and (even.sum(0) == 1).all()
    assert even[0].view(4, 4)[:2, :2].all() and even[3].view(4, 4)[2:, 2:].all()
    odd = block_membership(9, 2)  # 3x3: bins rows/cols 0-1 and 1-2 overlap in the middle
    assert (odd.sum(1) == 4).all() and odd.sum(0).view(3, 3)[1, 1] == 4
    with pytest.raises(ValueError, match="exceeds the grid side 3"):
        block_membership(9, 4)
    with pytest.raises(ValueError, match="square grid"):
        block_membership(8, 2)


def test_hierarchical_is_block_weight_times_share_within_block():
    torch.manual_seed(0)
    attn = build_attention("hierarchical", DQ, DK, DV, attn_dim=16, blocks=2)
    keys, values, q = torch.randn(1, 16, DK), torch.randn(1, 16, DV), torch.randn(1, 3, DQ)
    prep = attn.prepare(keys, values=values)
    ctx, w = attn(q, prep)
    member = block_membership(16, 2).bool()
    pooled = torch.stack([keys[0, m].mean(0) for m in member])  # (4, DK)
    coarse = (attn.q_coarse(q) @ attn.k_coarse(pooled).T / 4).softmax(-1)  # scale 16 ** -0.5
    fine = attn.q_fine(q) @ attn.k_fine(keys[0]).T / 4  # (1, 3, 16)
    want = torch.zeros(1, 3, 16)
    for b, m in enumerate(member):
        want[..., m] += coarse[..., b : b + 1] * fine[..., m].softmax(-1)
    assert torch.allclose(w, want, atol=1e-6)
    assert torch.allclose(ctx, w @ values, atol=1e-5)
    # one block holds everything: a plain (fine-level) softmax
    one = build_attention("hierarchical", DQ, DK, DV, attn_dim=16, blocks=1)
    _, w1 = one(q, one.prepare(keys, values=values))
    assert torch.allclose(w1, (one.q_fine(q) @ one.k_fine(keys[0]).T / 4).softmax(-1), atol=1e-6)


def test_graph_neighbourhoods():
    grid = grid_neighbours(9)  # 3x3
    assert grid.sum(1).tolist() == [4, 6, 4, 6, 9, 6, 4, 6, 4] and torch.equal(grid, grid.T)
    keys = torch.tensor([[[1.0, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]]])
    near = knn_neighbours(keys, 2, None)[0]
    assert near.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
    masked = knn_neighbours(keys, 2, torch.tensor([[True, False, True, True]]))[0]
    assert not masked[:, 1].any()  # a masked cell is nobody's neighbour


@pytest.mark.parametrize("adjacency", ["grid8", "knn"])
def test_graph_layer_only_mixes_neighbours(adjacency):
    torch.manual_seed(0)
    attn = build_attention("graph", DQ, DK, DV, adjacency=adjacency, knn=3)
    keys = torch.randn(1, 9, DK)
    refined = attn.refine(keys)
    edges = grid_neighbours(9) if adjacency == "grid8" else knn_neighbours(keys, 3, None)[0]
    far = int((~edges[0]).nonzero()[0])  # a cell that is not cell 0's neighbour
    moved = keys.clone()
    moved[0, far] = -3.0 * keys[0, 0]  # opposite to cell 0: still not its nearest neighbour
    if adjacency == "knn":
        assert torch.equal(knn_neighbours(moved, 3, None)[0][0], edges[0])
    assert torch.allclose(attn.refine(moved)[0, 0], refined[0, 0], atol=1e-5)
    assert not torch.allclose(refined, keys)  # the layer does change the keys


def test_aoa_gates_the_base_context():
    torch.manual_seed(0)
    attn = build_attention("aoa", DQ, DK, DV, base="additive", base_args={"attn_dim": 16})
    keys, values, q = torch.randn(2, 4, DK), torch.randn(2, 4, DV), torch.randn(2, 3, DQ)
    prep = attn.prepare(keys, values=values)
    ctx, w = attn(q, prep)
    base, base_w = attn.inner(q, prep)
    both = torch.cat([base, q], -1)
    assert torch.equal(w, base_w)
    assert torch.allclose(ctx, torch.sigmoid(attn.gate(both)) * attn.information(both), atol=1e-6)
    with pytest.raises(ValueError, match="another mode"):
        build_attention("aoa", DQ, DK, DV, base="aoa")


def test_adaptive_sentinel_takes_the_rest_and_brings_its_own_value():
    torch.manual_seed(0)
    attn = build_attention("adaptive", DQ, DK, DV, attn_dim=16)  # the Transformer's analogue
    keys, values, q = torch.randn(2, 4, DK), torch.randn(2, 4, DV), torch.randn(2, 3, DQ)
    prep = attn.prepare(keys, values=values)
    ctx, w = attn(q, prep)
    beta = sentinel_weight(w)  # (2, 3)
    assert ((beta > 0) & (beta < 1)).all()
    s = attn.sentinel(q, None)
    assert torch.allclose(ctx, w @ values + beta[..., None] * attn.sentinel_value(s), atol=1e-5)
    with torch.no_grad():  # tanh saturated high for the sentinel, low for every cell: it takes all
        sign = attn.v.weight[0].sign()
        attn.w_sentinel.bias.copy_(sign * 1e3)
        attn.w_key.bias.copy_(-sign * 1e3)
        attn.v.weight.mul_(100)
    _, w = attn(q, attn.prepare(keys, values=values))
    assert (sentinel_weight(w) > 0.99).all()


def test_adaptive_with_the_lstm_uses_its_input_and_memory_cell():
    torch.manual_seed(0)
    dec = build_decoder({"name": "lstm", "embed_dim": 16, "hidden_dim": 24, "value_dim": 8},
                        30, 40, {"name": "adaptive", "attn_dim": 16}).eval()
    assert dec.attention.takes_memory and dec.attention.input_dim == 16
    feats = torch.randn(2, 9, 40)
    state = dec.init_state(dec.prepare(feats), feats)
    tokens = torch.tensor([1, 1])
    _, _, w = dec.step(tokens, state)
    x = dec.embed(tokens)
    s = torch.sigmoid(dec.attention.gate_x(x) + dec.attention.gate_h(state.h)) * torch.tanh(state.c)
    assert torch.allclose(dec.attention.sentinel(state.h.unsqueeze(1), (x, state.c))[:, 0], s)
    changed = state.__class__(state.h, state.c + 1.0, state.prepared)  # only the memory cell
    _, _, w2 = dec.step(tokens, changed)
    assert not torch.allclose(w, w2)  # the memory reaches the attention through the sentinel
    with pytest.raises(ValueError, match="memory"):
        dec.attention(state.h, state.prepared)


def test_self_attention_refiner_respects_the_mask_and_keeps_the_width():
    torch.manual_seed(0)
    refiner = REFINERS["self_attention"](DK, layers=2, dim=16, heads=4).eval()
    feats, mask = torch.randn(2, 4, DK), torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]], dtype=torch.bool)
    out = refiner(feats, mask)
    assert out.shape == feats.shape
    poked = feats.clone()
    poked[0, 2] += 10.0  # the masked cell: nothing visible may change
    again = refiner(poked, mask)
    assert torch.allclose(again[0, [0, 1, 3]], out[0, [0, 1, 3]], atol=1e-5)
    assert not torch.allclose(refiner(poked)[0, 0], refiner(feats)[0, 0])  # unmasked, it does
    assert build_refiner({"refiner": "none"}, DK) is None
    with pytest.raises(ValueError, match="unknown model.refiner 'nope'; valid: self_attention"):
        build_refiner({"refiner": "nope"}, DK)


def test_the_figure_shows_the_sentinel_tile(tmp_path):
    import numpy as np

    from captioning.visualize import _figure

    image = np.full((64, 64, 3), 128, np.uint8)
    full = torch.full((2, 4), 0.25)
    part = torch.tensor([[0.1, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])  # step 1: sentinel 0.6
    titles = lambda fig: [c.get_title() for a in fig.axes for c in [a, *a.child_axes]]  # noqa: E731
    assert not any("sentinel" in t for t in titles(_figure(image, ["a", "b"], full, 3)))
    shown = [t for t in titles(_figure(image, ["a", "b"], part, 3)) if "sentinel" in t]
    assert shown == ["sentinel 0.60", "sentinel 0.00"]


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_adaptive_with_the_refiner_trains_and_logs_the_sentinel(decoder, tiny_cfg):
    """Through train(): attention=adaptive model.refiner=self_attention, both decoders; the
    sentinel's mean weight is reported, the refiner is in the checkpoint."""
    import csv
    from pathlib import Path

    from captioning.checkpoint import read_checkpoint
    from captioning.lit import train

    cfg = tiny_cfg(f"decoder={decoder}", "attention=adaptive", "model.refiner=self_attention",
                   "model.refiner_dim=32", "model.refiner_heads=4", "trainer.max_epochs=1",
                   "decode.beam_size=2", "logger=csv")
    results = train(cfg)
    assert 0 < results["test/attn_sentinel"] < 1
    rows = list(csv.DictReader((Path(cfg.paths.output_dir) / "csv" / "metrics.csv").open()))
    assert [r for r in rows if r.get("val/attn_sentinel") and 0 < float(r["val/attn_sentinel"]) < 1]
    best = Path(cfg.paths.output_dir) / "checkpoints" / "best.ckpt"
    assert any(k.startswith("model.refiner.layers.1.") for k in read_checkpoint(best)["state_dict"])
    from captioning import load_checkpoint

    model, _, _ = load_checkpoint(best)  # results.json's params count the refiner too
    assert results["params"] == sum(p.numel() for m in (model.decoder, model.refiner) for p in m.parameters())
