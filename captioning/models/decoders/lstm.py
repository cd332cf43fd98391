"""Show-Attend-Tell LSTM decoder: attention at every step, a sigmoid gate on the context,
initial state from the mean feature (or the encoder's global vector), deep output layer."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch
from torch import nn

from ...rules import at_least, between
from ..attention import ATTENTIONS, Prepared, build_attention, own_init_stream, placed
from ..cpu_speed import StepLinear
from ..precision_choice import to_autocast_dtype
from .keys import keys_only


@dataclass
class LSTMState:
    h: torch.Tensor  # (B, H)
    c: torch.Tensor  # (B, H)
    prepared: Prepared


class LSTMDecoder(nn.Module):
    """The query is h_{t-1} (width hidden_dim); keys are the raw features (width feature_dim),
    so the attention module alone handles the width mismatch. Values are projected to
    value_dim once per image, not once per step."""

    # Teacher-forced training through _TrainingSteps (each recurrent weight's gradient made once
    # over all steps); False: nn.LSTMCell at every step, the reference the tests compare it with.
    fused_training_steps = True

    def __init__(
        self,
        vocab_size: int,
        feature_dim: int,
        attention: dict,
        embed_dim: Annotated[int, at_least(1)] = 512,
        hidden_dim: Annotated[int, at_least(1)] = 512,
        value_dim: Annotated[int, at_least(1)] = 512,  # values projected once per image
        dropout: Annotated[float, between(0, 1, high_open=True)] = 0.3,
        gate: bool = True,
        prepare_once: bool = True,  # false: the naive baseline (keys/values re-projected every step)
        paired_init: bool = True,  # false: the attention's draws shift every later layer's start
        global_first: bool = False,  # features' first row is a global vector (set from the encoder)
    ) -> None:
        super().__init__()
        self.global_first = global_first
        # False = the naive baseline (tutorial style): keys and values are projected again at
        # every step. Same outputs, only slower; the benchmark measures what preparing saves.
        self.prepare_once = prepare_once
        attention = dict(attention)
        if "input_dim" in ATTENTIONS.target(attention["name"]).from_decoder:
            attention.setdefault("input_dim", embed_dim)  # e.g. adaptive's sentinel reads x_t
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.value_proj = nn.Linear(feature_dim, value_dim)
        # paired_init: every layer but the attention starts from the same weights in every mode
        # at one seed (attention/base.py: own_init_stream), so modes differ only in the attention.
        with own_init_stream(paired_init):
            self.attention = build_attention(
                attention.pop("name"), hidden_dim, feature_dim, value_dim, **attention
            )
        self.init_h = nn.Linear(feature_dim, hidden_dim)
        self.init_c = nn.Linear(feature_dim, hidden_dim)
        self.gate = nn.Linear(hidden_dim, value_dim) if gate else None
        self.cell = nn.LSTMCell(embed_dim + value_dim, hidden_dim)
        # Deep output: embedding + L_h h + L_z z, as in Show, Attend and Tell (eq. 7).
        self.out_h = nn.Linear(hidden_dim, embed_dim)
        self.out_z = nn.Linear(value_dim, embed_dim, bias=False)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(embed_dim, vocab_size)

    def prepare(self, features: torch.Tensor, mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> Prepared:
        """features (B, N, Df), mask (B, N), positions (B, N, 2) (regions' box centres) ->
        keys prepared and values projected, once per image. With global_first the first row is
        the global vector, not a key (see init_state)."""
        features, mask, positions = keys_only(features, mask, positions, self.global_first)
        if not self.prepare_once:  # naive baseline: carry the raw features, project per step
            return Prepared(features, features, mask, positions)
        features = to_autocast_dtype(features)  # one cast for both projections, not one each
        return placed(self.attention.prepare(features, mask, values=self.value_proj(features)), positions)

    def init_state(self, prepared: Prepared, features: torch.Tensor) -> LSTMState:
        """h0, c0 from the mean feature over unmasked positions, or from the global vector (the
        first row: ViT's class token) where the features have one."""
        if self.global_first:
            mean = features[:, 0]  # (B, Df)
        elif prepared.mask is None:
            mean = features.mean(1)  # (B, Df)
        else:
            m = prepared.mask.unsqueeze(-1).to(features.dtype)
            mean = (features * m).sum(1) / m.sum(1).clamp_min(1)
        return LSTMState(torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean)), prepared)

    def _advance(self, emb: torch.Tensor, state: LSTMState, steps: _TrainingSteps | None = None,
                 t: int = 0):
        """One LSTM step from the embedded token; returns (h, context, state, weights). With
        `steps` (teacher-forced training), the cell's and the gate's matmuls are step t of it."""
        prepared = state.prepared
        if not self.prepare_once:
            prepared = placed(self.attention.prepare(
                prepared.keys, prepared.mask, values=self.value_proj(prepared.values)
            ), prepared.positions)
        from_h = steps.from_h(state.h) if steps is not None else None  # (B, 4H [+ Dv])
        # A mode that takes the decoder's memory (adaptive: the sentinel) gets (x_t, c_{t-1}).
        memory = {"memory": (emb, state.c)} if getattr(self.attention, "takes_memory", False) else {}
        context, weights = self.attention(state.h, prepared, **memory)  # (B, Dv), (B, N)
        if self.gate is not None:
            gate = self.gate(state.h) if steps is None else steps.gate(from_h)
            context = torch.sigmoid(gate) * context
        if steps is None:
            h, c = self.cell(torch.cat([emb, context], dim=-1), (state.h, state.c))
        else:
            h, c = steps.cell(t, from_h, context, state.c)
        return h, context, replace(state, h=h, c=c), weights

    def _output(self, emb: torch.Tensor, h: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Deep output -> logits; (..., E), (..., H), (..., Dv) -> (..., V). Not recurrent, so
        teacher forcing runs it once over all steps."""
        return self.head(self.drop(emb + self.out_h(h) + self.out_z(context)))

    def step(self, tokens: torch.Tensor, state: LSTMState):
        """tokens (B,) -> logits (B, V), new state, attention weights (B, N)."""
        emb = self.embed(tokens)
        h, context, state, weights = self._advance(emb, state)
        return self._output(emb, h, context), state, weights

    def reorder(
        self, state: LSTMState, index: torch.Tensor, images: torch.Tensor | slice | None = None
    ) -> LSTMState:
        """Select batch rows: h and c by `index`. The prepared keys follow `index` too, unless
        `images` selects them per image instead (beam search: rows are beams, G per image, and
        `slice(None)` keeps the keys as they are, without a copy)."""
        pick = lambda t: t.index_select(0, index)  # noqa: E731
        prepared = state.prepared.map(pick if images is None else lambda t: t[images])
        return LSTMState(pick(state.h), pick(state.c), prepared)

    def forward(
        self,
        features: torch.Tensor,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        image_index: torch.Tensor | None = None,
        sample_prob: float = 0.0,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: features (I, N, Df), tokens (B, T) -> logits (B, T, V), weights
        (B, T, N); mask (I, N) and positions (I, N, 2) for region features (see prepare).

        `sample_prob` > 0 is scheduled sampling: from step 1 on, each row is fed, with that
        probability, the model's own previous prediction (argmax, no gradient through the choice)
        instead of the reference word; the deep output then sees what was fed.

        `image_index` (B,) says which image each caption belongs to (default: caption i <-> image
        i), so several captions of one image share its prepared keys: key work runs per image.
        With `lengths` (B,) (steps that matter per row), rows are sorted by length and step t
        runs only on the rows still going: padding costs nothing. Past a row's length its
        logits are meaningless and its weights are zero (the loss ignores them).
        """
        batch, steps = tokens.shape
        index = torch.arange(batch, device=tokens.device) if image_index is None else image_index
        counts = [batch] * steps
        order = None
        if lengths is not None:
            order = lengths.argsort(descending=True)
            tokens, index = tokens[order], index[order]
            steps_t = torch.arange(steps, device=lengths.device).unsqueeze(1)  # (T, 1)
            # Host copy on purpose: the per-step batch sizes drive the Python loop below.
            counts = (lengths[order].unsqueeze(0) > steps_t).sum(1).tolist()
        prepared = self.prepare(features, mask, positions)  # (I, ...) once per image
        state = self.reorder(self.init_state(prepared, features), index)  # (B, ...) per caption
        emb = self.embed(tokens)  # (B, T, E)
        # T views (B, E) with one backward node for all: indexing emb[:, t] at every step would
        # make each step's backward fill and add a whole (B, T, E) zero gradient (T^2 work).
        emb_steps = emb.unbind(1)
        fused = None
        if self.fused_training_steps and torch.is_grad_enabled() and self.prepare_once and sample_prob == 0:
            fused = _TrainingSteps(self, emb)  # each recurrent weight's gradient made once
            state = replace(state, h=fused.anchor(state.h))
        hs, contexts, weights, fed = [], [], [], []
        for t, n in enumerate(counts):
            if n == 0:
                break
            if n < state.h.shape[0]:  # the shortest rows are done: drop them (a view, no copy)
                state = LSTMState(state.h[:n], state.c[:n], state.prepared.map(lambda x: x[:n]))
            x = emb_steps[t][:n]  # (n, E)
            if sample_prob > 0 and t > 0:
                with torch.no_grad():  # the previous step's prediction, as decoding would make it
                    prev = self._output(fed[-1][:n, None], hs[-1][:n, None], contexts[-1][:n, None])
                    own = self.embed(prev[:, 0].argmax(-1))  # (n, E)
                use = torch.rand(n, device=x.device) < sample_prob
                x = torch.where(use[:, None], own, x)
            h, context, state, w = self._advance(x, state, fused, t)
            pad = (0, 0, 0, batch - n)
            hs.append(nn.functional.pad(h, pad))
            contexts.append(nn.functional.pad(context, pad))
            weights.append(nn.functional.pad(w, pad))
            if sample_prob > 0:
                fed.append(nn.functional.pad(x, pad))
        pad_t = steps - len(hs)
        hs, contexts = torch.stack(hs, 1), torch.stack(contexts, 1)  # (B, T', H), (B, T', Dv)
        weights = torch.stack(weights, 1)  # (B, T', N)
        emb = torch.stack(fed, 1) if sample_prob > 0 else emb[:, : steps - pad_t]  # (B, T', E)
        if order is not None:  # back to the caller's row order, before the (B, T, V) head
            inverse = order.argsort()
            hs, contexts, weights, emb = hs[inverse], contexts[inverse], weights[inverse], emb[inverse]
        # Deep output and vocabulary projection run once over all steps: a few big matmuls,
        # not T small ones each.
        logits = self._output(emb, hs, contexts)  # (B, T', V)
        if pad_t:
            logits = nn.functional.pad(logits, (0, 0, 0, pad_t))
            weights = nn.functional.pad(weights, (0, 0, 0, pad_t))
        return logits, weights


class _TrainingSteps:
    """The cell's and the gate's matmuls of one teacher-forced pass, arranged for the backward
    pass: the embeddings' share of the cell's input gates for all steps at once (one matmul, one
    weight gradient), and the per-step products with h_{t-1} (cell and gate, one matmul) and with
    the context as StepLinears (cpu_speed/step_linear.py: their weights' gradients made once over all steps,
    not summed step by step). The same function as nn.LSTMCell's, which decoding keeps using;
    the gates' elementwise work runs in fp32 (under bf16 autocast too: a CPU converts every bf16
    element for it)."""

    def __init__(self, decoder: LSTMDecoder, emb: torch.Tensor) -> None:
        cell, e = decoder.cell, emb.shape[-1]
        self.hidden = cell.hidden_size
        bias = cell.bias_ih + cell.bias_hh  # (4H,)
        self.from_emb = nn.functional.linear(emb, cell.weight_ih[:, :e], bias).unbind(1)  # T x (B, 4H)
        h_weights = [cell.weight_hh] + ([decoder.gate.weight] if decoder.gate is not None else [])
        self.from_h = StepLinear(torch.cat(h_weights))  # (4H [+ Dv], H)
        self.from_context = StepLinear(cell.weight_ih[:, e:])  # (4H, Dv)
        self.gate_bias = decoder.gate.bias if decoder.gate is not None else None

    def anchor(self, h0: torch.Tensor) -> torch.Tensor:
        return self.from_context.anchor(self.from_h.anchor(h0))

    def gate(self, from_h: torch.Tensor) -> torch.Tensor:
        return from_h[:, 4 * self.hidden:] + self.gate_bias  # (B, Dv)

    def cell(self, t: int, from_h: torch.Tensor, context: torch.Tensor,
             c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, h4 = context.shape[0], 4 * self.hidden
        gates = (self.from_emb[t][:n].float() + from_h[:, :h4].float()
                 + self.from_context(context).float())  # (B, 4H) in nn.LSTMCell's order i, f, g, o
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
