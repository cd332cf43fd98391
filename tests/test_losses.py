"""models/losses.py: the chunked cross-entropy gives F.cross_entropy's loss and gradient."""

import pytest
import torch
import torch.nn.functional as F

from captioning.models import losses
from captioning.models.losses import cross_entropy


def _both(logits: torch.Tensor, target: torch.Tensor, **kw):
    """(loss, grad) of ours and of F.cross_entropy on a float32 copy (the reference recipe)."""
    out = []
    for fn in (lambda x: cross_entropy(x, target, **kw),
               lambda x: F.cross_entropy(x.float(), target, **kw)):
        x = logits.detach().clone().requires_grad_()
        loss = fn(x)
        loss.backward()
        out.append((loss.detach(), x.grad))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_same_loss_and_gradient_as_torch(dtype, smoothing, monkeypatch):
    monkeypatch.setattr(losses, "CHUNK_ROWS", 7)  # several chunks and a ragged last one
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(30, 50, generator=g) * 3).to(dtype)
    target = torch.randint(1, 50, (30,), generator=g)
    target[::4] = 0  # padding rows
    (ours, ours_grad), (ref, ref_grad) = _both(logits, target, ignore_index=0, label_smoothing=smoothing)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    assert ours_grad.dtype == dtype  # the gradient comes back in the logits' dtype
    torch.testing.assert_close(ours_grad, ref_grad, rtol=0, atol=1e-6 if dtype == torch.float32 else 2e-3)
    assert ours_grad[::4].abs().max() == 0  # ignored rows get no gradient


def test_float32_logits_are_not_modified():
    logits = torch.randn(5, 9, requires_grad=True)
    before = logits.detach().clone()
    cross_entropy(logits, torch.arange(5)).backward()
    assert torch.equal(logits.detach(), before)


def test_every_row_ignored_gives_nan_as_torch():
    logits = torch.randn(3, 4)
    target = torch.zeros(3, dtype=torch.long)
    assert torch.isnan(cross_entropy(logits, target, ignore_index=0))
    assert torch.isnan(F.cross_entropy(logits, target, ignore_index=0))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"\(R, V\)"):
        cross_entropy(torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_scaled_loss_scales_the_gradient_made_in_forward(dtype):
    """The gradient is made in forward (float32, bfloat16) or in backward (float16, which a
    GradScaler scales first); either way a loss scaled by 3, or added to another, gets
    F.cross_entropy's gradient, and a second backward through a kept graph gets it again."""
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(20, 30, generator=g) * 2).to(dtype)
    target = torch.randint(0, 30, (20,), generator=g)
    x, ref = logits.clone().requires_grad_(), logits.float().clone().requires_grad_()
    loss = 3 * cross_entropy(x, target, label_smoothing=0.1) + x.float().sum() * 0
    loss.backward(retain_graph=True)
    (3 * F.cross_entropy(ref, target, label_smoothing=0.1)).backward()
    tol = {torch.float32: 1e-6, torch.bfloat16: 5e-3, torch.float16: 1e-3}[dtype]
    torch.testing.assert_close(x.grad.float(), ref.grad, rtol=0, atol=tol)
    first = x.grad.clone()
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * first)


def test_without_a_gradient_only_the_loss_is_made():
    logits, target = torch.randn(9, 11), torch.arange(9)
    with torch.no_grad():
        loss = cross_entropy(logits, target)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target))
    assert loss.grad_fn is None
