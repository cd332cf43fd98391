"""Modes compared at one seed differ only in their attention: every layer whose shape does not
depend on the mode starts from the same weights in every mode (decoder.paired_init), at both
widths the comparison uses, for both decoders. With paired_init=false (the build the older
committed cells ran under) they do not, which is what the rule is for."""

import pytest
import torch

from captioning.models import ATTENTIONS, build_decoder

VOCAB = 50
SIZES = {"lstm": {"embed_dim": 64, "hidden_dim": 64, "value_dim": 64},
         "transformer": {"d_model": 64, "num_layers": 2, "num_heads": 4, "ff_dim": 96}}


def _shared(decoder: str, width: int, mode: str, paired: bool) -> dict[str, torch.Tensor]:
    """The decoder's tensors outside its cross-attention, built at seed 0."""
    torch.manual_seed(0)
    dec = build_decoder({"name": decoder, **SIZES[decoder], "paired_init": paired}, VOCAB, width,
                        {"name": mode})
    attention = "attention." if decoder == "lstm" else ".cross."
    return {k: v.detach().clone() for k, v in dec.state_dict().items() if attention not in k
            and not k.startswith("attention.")}


@pytest.mark.parametrize("width", [64, 256], ids=["matched", "mismatched"])
@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_every_mode_starts_its_shared_layers_alike(decoder, width):
    reference = _shared(decoder, width, "additive", True)
    assert len(reference) >= 8  # embeddings, projections, cell or layers, head
    for mode in sorted(ATTENTIONS):
        other = _shared(decoder, width, mode, True)
        assert other.keys() == reference.keys(), mode
        differ = [k for k in reference if not torch.equal(reference[k], other[k])]
        assert not differ, f"{decoder} at {width}-d, {mode}: {differ}"


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_without_the_rule_modes_start_their_shared_layers_apart(decoder):
    """The control: the old build order gives additive and dot different shared layers (the
    reason for the rule), so the test above can fail."""
    additive, dot = (_shared(decoder, 256, mode, False) for mode in ("additive", "dot"))
    assert any(not torch.equal(additive[k], dot[k]) for k in additive)


def test_the_rule_leaves_the_attention_its_own_draws_and_the_global_stream_one_draw():
    """Paired init consumes exactly one number of the global stream for the attention, whatever
    its size; its own weights are still random (not a copy of a later layer's)."""
    torch.manual_seed(0)
    build_decoder({"name": "lstm", **SIZES["lstm"]}, VOCAB, 256, {"name": "additive"})
    after_additive = torch.rand(3)
    torch.manual_seed(0)
    dec = build_decoder({"name": "lstm", **SIZES["lstm"]}, VOCAB, 256, {"name": "multihead_additive"})
    assert torch.equal(after_additive, torch.rand(3))
    weights = [p for p in dec.attention.parameters() if p.dim() == 2]
    assert weights and all(w.std() > 0 for w in weights)
