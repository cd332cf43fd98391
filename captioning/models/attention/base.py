"""What every cross-attention module shares: the prepared-keys record, masking, the registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace

import torch
from torch import nn

from ..registry import Registry


@dataclass
class Prepared:
    """Key-side work done once per image and reused at every step and for every beam.

    keys: the module's projected keys (shape depends on the module, batch first);
    values: (B, N, Dv) what the weights average; mask: (B, N) True = attend, or None;
    positions: (B, N, 2) each region's centre (row, col) in [0, 1] when the features are boxes
    (precomputed region features), None for a grid (the positions follow from N).
    """

    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor | None = None
    positions: torch.Tensor | None = None

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Prepared:
        """Apply fn to every tensor field (e.g. index_select for beam reordering)."""
        return replace(self, **{
            f.name: fn(v) for f in fields(self) if isinstance(v := getattr(self, f.name), torch.Tensor)
        })


def placed(prepared: Prepared, positions: torch.Tensor | None) -> Prepared:
    """`prepared` with the regions' positions (B, N, 2) attached (boxes), or as it is (a grid).
    Wrapping modes (aoa, graph, mixed) hand the same record to their inner mode, so a module
    that reads positions finds them wherever it sits."""
    return prepared if positions is None else replace(prepared, positions=positions)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dim (N); masked positions get exactly 0, all-masked rows all 0.

    scores (B, T, N), mask (B, N).
    """
    if mask is None:
        return scores.softmax(dim=-1)
    scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return scores.softmax(dim=-1).nan_to_num(0.0)  # all -inf rows give NaN


def full_precision(x: torch.Tensor):
    """A context without autocast on x's device: the ops inside run in their inputs' dtype."""
    return torch.autocast(x.device.type, enabled=False)


class CrossAttention(nn.Module):
    """Base class: subclasses implement `_prepare_keys` and `_scores`; queries may be (B, Dq)
    or (B, T, Dq)."""

    # What a mode declares instead of being named elsewhere (decoders, the LightningModule):
    # False where the returned weights are computed beside the context for diagnostics, not the
    # ones that make it (linear attention): a loss on them (optim.alpha_c) is refused.
    weights_make_context = True
    # True where the weights may sum to less than 1, the rest going to a sentinel (adaptive).
    has_sentinel = False
    # Keywords the decoder supplies rather than the config (adaptive: `input_dim`, the width of
    # the decoder's input x_t, which the LSTM then passes with its memory at every step).
    from_decoder: tuple[str, ...] = ()
    # Per registered name: (its score, when to use it), docs/model.md's table of modes (the
    # parameter counts are built, not typed). A mode without an entry shows its docstring.
    table: dict[str, tuple[str, str]] = {}

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None) -> None:
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        self.value_dim = key_dim if value_dim is None else value_dim

    def step_statistics(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """weights (M, N), one decoding step per row -> {metric name: (M,)} this mode reports
        beside the entropy, max and min of every mode (adaptive: the sentinel's share)."""
        return {}

    def pop_statistics(self) -> dict[str, float]:
        """Means this mode accumulated over the queries since the last pop (gated_mixed: its
        gate), reset by popping; the LightningModule logs them per stage."""
        return {}

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (B, T, Dq), prepared keys -> scores (B, T, N)."""
        raise NotImplementedError

    def prepare(
        self,
        keys: torch.Tensor,
        mask: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
    ) -> Prepared:
        """keys (B, N, Dk), mask (B, N) bool, values (B, N, Dv) (default: the keys)."""
        values = keys if values is None else values
        if values.shape[-1] != self.value_dim:
            raise ValueError(f"values have width {values.shape[-1]}, module expects {self.value_dim}")
        return Prepared(self._prepare_keys(keys), values, mask)

    def _weights(self, query: torch.Tensor, prepared: Prepared) -> torch.Tensor:
        """query (B, T, Dq) -> weights (B, T, N)."""
        return masked_softmax(self._scores(query, prepared.keys), prepared.mask)

    def _attend(self, query: torch.Tensor, prepared: Prepared) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, T, Dq) -> context (B, T, Dv), weights (B, T, N)."""
        weights = self._weights(query, prepared)  # (B, T, N)
        return weights.to(prepared.values.dtype) @ prepared.values, weights

    def forward(
        self, query: torch.Tensor, prepared: Prepared
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (R, Dq) | (R, T, Dq) -> context (R, [T,] Dv), weights (R, [T,] N).

        R may be a multiple G of the prepared batch B (rows image-major: G beams per image):
        the G rows of an image are then read as G*T queries against that image's keys, so
        beam search never copies prepared keys per beam.
        """
        single = query.dim() == 2
        q = query.unsqueeze(1) if single else query  # (R, T, Dq)
        rows, t = q.shape[:2]
        context, weights = self._attend(group_rows(q, prepared.values.shape[0]), prepared)
        context, weights = context.reshape(rows, t, -1), weights.reshape(rows, t, -1)
        if single:
            return context.squeeze(1), weights.squeeze(1)
        return context, weights


def group_rows(x: torch.Tensor, images: int) -> torch.Tensor:
    """(R, T, D) per-row queries (or anything per query) -> (B, G*T, D) for B prepared images
    when R = G*B rows are image-major (G beams per image); unchanged when R == B."""
    rows, t = x.shape[:2]
    if rows == images:
        return x
    if rows % images:
        raise ValueError(f"{rows} query rows do not group over {images} prepared images")
    return x.reshape(images, rows // images * t, x.shape[-1])


ATTENTION_STATS = ("attn_entropy", "attn_max", "attn_min")


def doubly_stochastic_penalty(weights: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Show-Attend-Tell's regulariser: per caption sum over positions i of (1 - sum over its
    steps t of weights[t, i])^2, averaged over captions. weights (B, T, N); valid (B, T) marks
    the steps that count (padding excluded) -> scalar."""
    coverage = (weights * valid.unsqueeze(-1).to(weights.dtype)).sum(1)  # (B, N)
    return (1.0 - coverage).square().sum(-1).mean()


def attention_step_stats(weights: torch.Tensor) -> torch.Tensor:
    """weights (M, N), one attention distribution per row -> (M, 3): entropy (nats), max and
    min weight of each, in the order of ATTENTION_STATS (sums of these rows average exactly
    over any grouping, e.g. images gathered from several processes)."""
    w = weights.detach().float()
    entropy = -(w * w.clamp_min(1e-12).log()).sum(-1)
    return torch.stack([entropy, w.max(-1).values, w.min(-1).values], dim=-1)


def attention_stats(weights: torch.Tensor, valid: torch.Tensor | None = None) -> dict[str, float]:
    """Entropy (nats), max and min weight per attention distribution, averaged.

    weights (..., N); valid (...) selects the distributions that count (e.g. steps before <eos>).
    A collapsed attention shows entropy ~0 and max ~1; a uniform one entropy ~log N.
    """
    w = weights.flatten(0, -2)  # (M, N)
    if valid is not None:
        w = w[valid.flatten()]
    if len(w) == 0:
        return {}
    means = attention_step_stats(w).mean(0)  # (3,)
    # One device-to-host copy for the three numbers (called once per decoded batch).
    return dict(zip(ATTENTION_STATS, means.tolist()))


ATTENTIONS: Registry[Callable[..., CrossAttention]] = Registry("attention")
register = ATTENTIONS.register


def build_attention(
    name: str, query_dim: int, key_dim: int, value_dim: int | None = None, **cfg
) -> CrossAttention:
    """Build a registered attention module; unknown names list the valid ones."""
    return ATTENTIONS[name](query_dim, key_dim, value_dim, **cfg)


@contextmanager
def own_init_stream(enabled: bool = True) -> Iterator[None]:
    """Build the attention module inside this, and the layers built after it get the same initial
    weights whatever the mode: one seed is drawn from the global CPU generator (one draw for
    every mode), the module's own initialisation runs on a stream seeded by it, and the global
    state is then put back to just after that draw. Without it, a mode with more parameters
    draws more numbers and every later layer starts elsewhere, so two modes compared "at one
    seed" would differ in their shared layers too. enabled=False: the old build (a decoder's
    `paired_init=false`, for runs recorded under it)."""
    if not enabled or torch.get_default_device().type == "meta":  # a shape check draws nothing
        yield
        return
    seed = int(torch.randint(0, 2**62, (1,), device="cpu").item())  # CPU whatever the default device
    state = torch.get_rng_state()
    torch.default_generator.manual_seed(seed)  # the CPU generator only: CUDA's stays as it is
    try:
        yield
    finally:
        torch.set_rng_state(state)


def cross_attention_modules(model: nn.Module) -> list[CrossAttention]:
    """The outermost cross-attention modules of a model (one per decoder layer): a module
    nested inside another (e.g. the one `mixed` wraps) is part of its parent, not counted
    again. What parameter counts and torch.compile work on."""
    found = [m for m in model.modules() if isinstance(m, CrossAttention)]
    inner = {id(c) for m in found for c in m.modules() if c is not m}
    return [m for m in found if id(m) not in inner]
