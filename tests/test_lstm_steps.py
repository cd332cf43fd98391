"""The LSTM's teacher-forced training path (decoders/lstm.py: _TrainingSteps, cpu_speed/step_linear.py:
each recurrent weight's gradient made once over all steps) against nn.LSTMCell at every step."""

import copy

import pytest
import torch

from captioning.models import ATTENTIONS, build_decoder
from captioning.models.cpu_speed import StepLinear

V, DF = 30, 24


def pair(attention: str, gate: bool = True):
    torch.manual_seed(0)
    fused = build_decoder({"name": "lstm", "embed_dim": 16, "hidden_dim": 20, "value_dim": 12,
                           "gate": gate, "dropout": 0.0}, V, DF, {"name": attention})
    plain = copy.deepcopy(fused)
    plain.fused_training_steps = False
    return fused, plain


def run(dec, feats, tokens, lengths, index, autocast=None):
    """Logits where they count and every parameter's gradient of a length-masked loss."""
    dec.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
        logits, _ = dec(feats, tokens, lengths=lengths, image_index=index)
    keep = (torch.arange(tokens.shape[1])[None] < lengths[:, None]).float()  # (B, T)
    loss = (logits.float().log_softmax(-1)[..., 3] * keep).sum()
    loss.backward()
    return logits.float() * keep[..., None], {n: p.grad for n, p in dec.named_parameters()
                                              if p.grad is not None}


def inputs():
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(3, 9, DF, generator=g)  # 3 images, a 3x3 grid
    tokens = torch.randint(0, V, (6, 7), generator=g)
    lengths = torch.tensor([7, 3, 5, 7, 1, 6])  # rows drop out step by step
    return feats, tokens, lengths, torch.tensor([0, 0, 1, 1, 2, 2])


def assert_close(a, b, rel):
    scale = max(b.abs().max().item(), 1e-3)
    assert (a - b).abs().max().item() <= rel * scale, ((a - b).abs().max().item(), scale)


@pytest.mark.parametrize("gate", [True, False])
@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_fused_steps_give_the_cells_logits_and_gradients(attention, gate):
    fused, plain = pair(attention, gate)
    logits_f, grads_f = run(fused, *inputs())
    logits_p, grads_p = run(plain, *inputs())
    assert_close(logits_f, logits_p, 1e-5)
    assert grads_f.keys() == grads_p.keys()
    scale = max(g.abs().max().item() for g in grads_p.values())
    for name in grads_p:  # against the largest gradient: a near-zero one has no relative scale
        assert (grads_f[name] - grads_p[name]).abs().max().item() <= 1e-5 * scale, name


def test_fused_steps_under_bf16_autocast_match_to_bf16_rounding():
    fused, plain = pair("additive")
    logits_f, grads_f = run(fused, *inputs(), autocast=torch.bfloat16)
    logits_p, grads_p = run(plain, *inputs(), autocast=torch.bfloat16)
    assert_close(logits_f, logits_p, 0.05)
    for name in grads_p:
        assert grads_f[name].dtype == torch.float32, name  # gradients in the weights' dtype
        assert_close(grads_f[name], grads_p[name], 0.1)


def test_the_plain_path_serves_decoding_and_scheduled_sampling():
    """No gradient (validation, decoding) and scheduled sampling run nn.LSTMCell: the fused
    path is only the teacher-forced backward's arrangement."""
    fused, plain = pair("dot")
    feats, tokens, lengths, index = inputs()
    with torch.no_grad():
        a, _ = fused(feats, tokens, lengths=lengths, image_index=index)
        b, _ = plain(feats, tokens, lengths=lengths, image_index=index)
    assert torch.equal(a, b)
    torch.manual_seed(5)
    a, _ = fused(feats, tokens, lengths=lengths, image_index=index, sample_prob=0.5)
    torch.manual_seed(5)
    b, _ = plain(feats, tokens, lengths=lengths, image_index=index, sample_prob=0.5)
    assert torch.equal(a, b)


def test_a_step_input_not_depending_on_the_anchor_fails_loudly():
    """A step's gradient that would arrive after the weight's gradient was made is refused,
    not dropped."""
    weight = torch.randn(4, 3, requires_grad=True)
    linear = StepLinear(weight)
    stray = torch.randn(2, 3, requires_grad=True)  # not made from the anchored state, and
    early = linear(stray)  # made before it: autograd runs its backward after the anchor's
    h = linear.anchor(torch.randn(2, 3, requires_grad=True))
    out = linear(h).sum() + early.sum()
    with pytest.raises(RuntimeError, match="does not depend on the anchored state"):
        out.backward()


def test_step_linear_gradient_equals_autograds():
    torch.manual_seed(0)
    weight = torch.randn(5, 5, requires_grad=True)
    h0 = torch.randn(3, 5, requires_grad=True)
    linear = StepLinear(weight)
    h, outs = linear.anchor(h0), []
    for n in (3, 3, 2, 1):  # rows drop out, as in the decoder
        h = torch.tanh(linear(h[:n]))
        outs.append(h.sum())
    sum(outs).backward()
    got_w, got_h = weight.grad.clone(), h0.grad.clone()
    weight.grad = h0.grad = None
    h, outs = h0, []
    for n in (3, 3, 2, 1):
        h = torch.tanh(h[:n] @ weight.t())
        outs.append(h.sum())
    sum(outs).backward()
    assert torch.allclose(got_w, weight.grad, atol=1e-5) and torch.allclose(got_h, h0.grad, atol=1e-5)
