"""Linear layers inside a teacher-forced recurrent loop, with each weight's gradient made once
over all steps instead of once per step.

Autograd gives a weight used at T steps T small gradient matmuls (K_out x B_t x K_in each) and
T - 1 additions of a weight-sized gradient. For the LSTM's own weights at batch 64 those sums
and small matmuls are a large part of the backward pass that is not arithmetic
(docs/benchmarks.md). Here a step's backward makes only its input's gradient and records
(input, output gradient); the weight's gradient is one matmul over every step's rows, made by
the backward of an `anchor` placed on the loop's first state. Every step depends on that
state, so autograd runs the anchor's backward after every step's: it checks that it has seen
them all, and fails loudly otherwise (an input that does not depend on the anchor).

    linear = StepLinear(weight)        # once per forward, before the loop
    h = linear.anchor(h0)              # identity; its backward makes weight.grad
    for t in range(T):
        y = linear(h)                  # h @ weight.T, (B_t, K_out)
        h = ...                        # every input of `linear` depends on the anchored state

Under autocast the weight is cast once (not once per step) and each step's product runs in
autocast's dtype, as nn.Linear's would; the weight's gradient is returned in its own dtype.
"""

from __future__ import annotations

import torch

from ..precision_choice import to_autocast_dtype


class _Step(torch.autograd.Function):
    """y = x @ w.T with w a constant here: its gradient goes to the owner's record."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, owner: StepLinear) -> torch.Tensor:
        x_w = x.to(w.dtype)
        ctx.save_for_backward(x_w, w)
        ctx.owner, ctx.x_dtype = owner, x.dtype
        return x_w @ w.t()  # (B_t, K_out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x_w, w = ctx.saved_tensors
        grad = grad.to(w.dtype)
        ctx.owner.records.append((x_w, grad))
        grad_x = (grad @ w).to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
        return grad_x, None, None


class _Anchor(torch.autograd.Function):
    """Identity on the loop's first state; its backward makes the weight's gradient."""

    @staticmethod
    def forward(ctx, state: torch.Tensor, weight: torch.Tensor, owner: StepLinear) -> torch.Tensor:
        ctx.owner = owner
        return state.view_as(state)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        owner = ctx.owner
        records, owner.records = owner.records, []
        if len(records) != owner.calls:
            raise RuntimeError(
                f"StepLinear: {len(records)} of {owner.calls} steps' gradients arrived before the "
                "anchor's backward: an input of the step linear does not depend on the anchored "
                "state (models/cpu_speed/step_linear.py)")
        if not records:
            return grad, None, None
        x = torch.cat([r[0] for r in records])  # (sum B_t, K_in)
        g = torch.cat([r[1] for r in records])  # (sum B_t, K_out)
        return grad, (g.t() @ x).to(owner.weight.dtype), None  # (K_out, K_in)


class StepLinear:
    """`weight` (K_out, K_in) applied at every step of one forward pass, its gradient summed
    once (see the module's docstring). Made anew for each forward; not a module: the weight
    belongs to the caller's modules, as do its state_dict keys."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight, self.records, self.calls = weight, [], 0
        self._w = to_autocast_dtype(weight.detach())  # cast once, not once per step

    def anchor(self, state: torch.Tensor) -> torch.Tensor:
        return _Anchor.apply(state, self.weight, self)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return _Step.apply(x, self._w, self)
