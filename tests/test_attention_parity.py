"""Our modules against PyTorch's reference implementations, and the family's bookkeeping."""

import pytest
import torch
import torch.nn.functional as F

from captioning.models import build_attention
from captioning.models.attention import attention_stats


def test_scaled_dot_matches_torch_sdpa():
    torch.manual_seed(0)
    attn = build_attention("scaled_dot", 16, 16, 16)
    assert attn.proj is None  # no projections when the widths match
    q, k, v = torch.randn(3, 5, 16), torch.randn(3, 7, 16), torch.randn(3, 7, 16)
    mask = torch.rand(3, 7) > 0.3
    mask[:, 0] = True
    ctx, _ = attn(q, attn.prepare(k, mask, v))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, :])
    assert torch.allclose(ctx, ref, atol=1e-5)


def test_multihead_dot_matches_torch_multihead_attention():
    torch.manual_seed(0)
    dq, dk, heads = 32, 48, 4
    ours = build_attention("multihead_dot", dq, dk, dq, num_heads=heads)
    ref = torch.nn.MultiheadAttention(dq, heads, kdim=dk, vdim=dq, batch_first=True)
    with torch.no_grad():
        ref.q_proj_weight.copy_(ours.q_proj.weight)
        ref.k_proj_weight.copy_(ours.k_proj.weight)
        ref.v_proj_weight.copy_(ours.v_proj.weight)
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    q, k, v = torch.randn(2, 6, dq), torch.randn(2, 9, dk), torch.randn(2, 9, dq)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 5:] = False
    ctx, w = ours(q, ours.prepare(k, mask, v))
    ref_ctx, ref_w = ref(q, k, v, key_padding_mask=~mask)
    assert torch.allclose(ctx, ref_ctx, atol=1e-5) and torch.allclose(w, ref_w, atol=1e-5)


def test_mixed_rule_and_identity_with_the_mode_it_picks():
    torch.manual_seed(0)
    mismatched = build_attention("mixed", 16, 64, 8, attn_dim=12)
    matched = build_attention("mixed", 16, 16, 8)
    assert mismatched.choice == "additive" and matched.choice == "dot"
    torch.manual_seed(0)
    additive = build_attention("additive", 16, 64, 8, attn_dim=12)
    k, v, q = torch.randn(2, 5, 64), torch.randn(2, 5, 8), torch.randn(2, 3, 16)
    a = mismatched(q, mismatched.prepare(k, values=v))
    b = additive(q, additive.prepare(k, values=v))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_gated_mixed_reports_its_mean_gate_over_every_step():
    attn = build_attention("gated_mixed", 8, 16, 8, attn_dim=8)
    prepared = attn.prepare(torch.randn(2, 4, 16), values=torch.randn(2, 4, 8))
    assert attn.pop_gate() is None  # nothing ran yet
    queries = [torch.randn(2, 8), torch.randn(2, 3, 8)]  # a step, then three steps at once
    for q in queries:
        attn(q, prepared)
    # Independent answer: the gate of every query of every call, averaged.
    expected = torch.cat([torch.sigmoid(attn.gate(q)).flatten() for q in queries]).mean()
    assert attn.pop_gate() == pytest.approx(float(expected), abs=1e-6)
    assert attn.pop_gate() is None  # popping resets


def test_sparse_topk_keeps_k_positions():
    attn = build_attention("sparse_topk", 8, 8, 8, topk=3)
    _, w = attn(torch.randn(4, 2, 8), attn.prepare(torch.randn(4, 10, 8)))
    assert ((w > 0).sum(-1) == 3).all()


def test_local_window_follows_the_predicted_centre():
    torch.manual_seed(0)
    attn = build_attention("local", 8, 8, 8, window=1.0)
    with torch.no_grad():  # make the bilinear part flat: only the window decides
        attn.proj.weight.zero_()
        attn.centre[2].weight.zero_()
        attn.centre[2].bias.copy_(torch.tensor([10.0, -10.0]))  # bottom-left of a 4x4 grid
    _, w = attn(torch.randn(1, 8), attn.prepare(torch.randn(1, 16, 8)))
    assert w.argmax().item() == 12  # row 3, col 0


def test_linear_context_equals_its_weights_times_values():
    attn = build_attention("linear", 8, 12, 6)
    v = torch.randn(2, 7, 6)
    ctx, w = attn(torch.randn(2, 3, 8), attn.prepare(torch.randn(2, 7, 12), values=v))
    assert torch.allclose(ctx, w @ v, atol=1e-5)


def test_attention_stats_uniform_and_collapsed():
    uniform = attention_stats(torch.full((2, 3, 4), 0.25))
    assert uniform["attn_entropy"] == pytest.approx(torch.log(torch.tensor(4.0)).item(), abs=1e-5)
    collapsed = attention_stats(torch.eye(4)[None])
    assert collapsed["attn_entropy"] == pytest.approx(0.0, abs=1e-6) and collapsed["attn_max"] == 1.0
    assert attention_stats(torch.rand(2, 4), valid=torch.tensor([False, False])) == {}


@pytest.mark.parametrize(
    "name, kw", [("additive", {"init": "orthogonal", "attn_dim": 16}), ("dot", {"init": "matched"})]
)
def test_init_strategies(name, kw):
    attn = build_attention(name, 16, 32, 8, **kw)
    if name == "additive":
        w = attn.w_key.weight  # (A, Dk) orthogonal rows
        assert torch.allclose(w @ w.T, torch.eye(w.shape[0]), atol=1e-5)
        assert (attn.w_key.bias == 0).all()
    else:
        assert attn.proj.weight.std().item() == pytest.approx(32**-0.5, rel=0.1)
    with pytest.raises(ValueError, match="attention.init"):
        build_attention(name, 16, 32, 8, init="bogus")


@pytest.mark.parametrize("name", ["dot", "scaled_dot", "general", "sparse_topk"])
def test_relative_position_bias_with_the_dot_family(name):
    torch.manual_seed(0)
    attn = build_attention(name, 8, 8, 8, position_bias="relative_2d")
    q, k = torch.randn(2, 3, 8), torch.randn(2, 16, 8)  # a 4x4 grid
    ctx, w = attn(q, attn.prepare(k))
    assert torch.allclose(w.sum(-1), torch.ones(2, 3), atol=1e-6)
    ctx.sum().backward()
    assert attn.pos_bias.table.grad.abs().sum() > 0 and attn.pos_bias.ref.weight.grad.abs().sum() > 0
    with torch.no_grad():  # the bias changes the weights
        plain = build_attention(name, 8, 8, 8)
        plain.load_state_dict({k: v for k, v in attn.state_dict().items() if "pos_bias" not in k})
        attn.pos_bias.table.mul_(100)
        assert not torch.allclose(attn(q, attn.prepare(k))[1], plain(q, plain.prepare(k))[1])
