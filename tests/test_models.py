import pytest
import torch

from captioning.models import ATTENTIONS, build_attention, build_decoder, greedy_decode
from captioning.models.attention import masked_softmax
from captioning.models.attention.adaptive import sentinel_weight
from captioning.models.attention.hierarchical import HierarchicalAttention

DQ, DK, DV = 12, 20, 8


@pytest.fixture(params=sorted(ATTENTIONS))
def attn(request):
    torch.manual_seed(0)
    return build_attention(request.param, DQ, DK, DV)


def visual_mass(attn, w: torch.Tensor) -> torch.Tensor:
    """What the grid weights must sum to: 1, or 1 - the sentinel's weight (adaptive)."""
    return 1 - sentinel_weight(w) if getattr(attn, "has_sentinel", False) else torch.ones(w.shape[:-1])


# Grids are square (3x3, 2x2, 1x1): hierarchical pools blocks and graph's grid8 neighbourhood
# needs rows and columns.
def test_shapes_for_both_query_shapes(attn):
    keys, values = torch.randn(3, 9, DK), torch.randn(3, 9, DV)
    prep = attn.prepare(keys, values=values)
    ctx, w = attn(torch.randn(3, DQ), prep)
    assert ctx.shape == (3, DV) and w.shape == (3, 9)
    ctx, w = attn(torch.randn(3, 4, DQ), prep)
    assert ctx.shape == (3, 4, DV) and w.shape == (3, 4, 9)
    assert torch.allclose(w.sum(-1), visual_mass(attn, w), atol=1e-6) and (w >= 0).all()
    if getattr(attn, "has_sentinel", False):  # the sentinel takes a real share, not all of it
        assert (0 < w.sum(-1)).all() and (w.sum(-1) < 1).all()


def test_masked_positions_get_zero_weight(attn):
    keys, values = torch.randn(2, 4, DK), torch.randn(2, 4, DV)
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0]], dtype=torch.bool)
    ctx, w = attn(torch.randn(2, 3, DQ), attn.prepare(keys, mask, values))
    assert (w[~mask[:, None, :].expand_as(w)] == 0).all()
    assert torch.allclose(w.sum(-1), visual_mass(attn, w), atol=1e-6)
    one = torch.eye(4)[0].expand(3, 4) * visual_mass(attn, w[1])[:, None]
    assert torch.allclose(w[1], one, atol=1e-6)  # one visible position takes all (that is visual)


def test_batch_of_one_and_single_position(attn):
    keys, values = torch.randn(1, 1, DK), torch.randn(1, 1, DV)
    if isinstance(attn, HierarchicalAttention):  # 2x2 blocks cannot exist on a 1x1 grid
        with pytest.raises(ValueError, match="exceeds the grid side 1"):
            attn.prepare(keys, values=values)
        return
    ctx, w = attn(torch.randn(1, DQ), attn.prepare(keys, values=values))
    assert ctx.shape == (1, DV) and torch.allclose(w, visual_mass(attn, w)[:, None])


def test_every_parameter_gets_gradient(attn):
    keys, values = torch.randn(4, 9, DK), torch.randn(4, 9, DV)
    ctx, _ = attn(torch.randn(4, 3, DQ), attn.prepare(keys, values=values))
    (ctx * torch.randn_like(ctx)).sum().backward()
    for name, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_steps_equal_all_at_once(attn):
    """Prepared once and queried step by step == one call with all T queries."""
    keys, values, q = torch.randn(2, 9, DK), torch.randn(2, 9, DV), torch.randn(2, 4, DQ)
    prep = attn.prepare(keys, values=values)
    full, w_full = attn(q, prep)
    for t in range(4):
        ctx, w = attn(q[:, t], prep)
        assert torch.allclose(ctx, full[:, t], atol=1e-5) and torch.allclose(w, w_full[:, t], atol=1e-6)


@pytest.mark.parametrize("query_shape", [(6, DQ), (6, 2, DQ)])
def test_grouped_rows_equal_copied_keys(attn, query_shape):
    """G query rows per prepared image (beam search) == keys copied to every row."""
    keys, values = torch.randn(2, 4, DK), torch.randn(2, 4, DV)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    prep = attn.prepare(keys, mask, values)
    q = torch.randn(*query_shape)  # 3 rows per image, image-major
    ctx, w = attn(q, prep)
    ref_ctx, ref_w = attn(q, prep.map(lambda t: t.repeat_interleave(3, 0)))
    assert torch.allclose(ctx, ref_ctx, atol=1e-5) and torch.allclose(w, ref_w, atol=1e-6)
    with pytest.raises(ValueError, match="do not group"):
        attn(torch.randn(5, DQ), prep)


def test_unknown_names_list_valid_ones():
    with pytest.raises(ValueError, match="valid: .*additive.*dot"):
        build_attention("nonsense", 4, 4)
    with pytest.raises(ValueError, match="valid: lstm"):
        build_decoder({"name": "gru"}, 10, 8, {"name": "dot"})


def test_dot_needs_projection_when_widths_differ():
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        build_attention("dot", 4, 8, project="none")
    assert build_attention("dot", 8, 8).proj is None


def test_masked_softmax_all_masked_row_is_zero():
    w = masked_softmax(torch.randn(1, 2, 3), torch.zeros(1, 3, dtype=torch.bool))
    assert (w == 0).all()


@pytest.mark.parametrize("name", ["additive", "dot", "adaptive", "hierarchical", "graph", "aoa"])
def test_lstm_decoder_step_matches_teacher_forcing(name):
    torch.manual_seed(0)
    dec = build_decoder({"name": "lstm", "embed_dim": 16, "hidden_dim": 24, "value_dim": 8},
                        30, 40, {"name": name}).eval()
    feats, tokens = torch.randn(3, 9, 40), torch.randint(0, 30, (3, 5))  # a 3x3 grid
    logits, weights = dec(feats, tokens)
    assert logits.shape == (3, 5, 30) and weights.shape == (3, 5, 9)
    state = dec.init_state(dec.prepare(feats), feats)
    for t in range(5):
        step_logits, state, w = dec.step(tokens[:, t], state)
        assert torch.allclose(step_logits, logits[:, t], atol=1e-5)
    # reorder picks rows of every state tensor (beam search relies on it)
    idx = torch.tensor([2, 0])
    re = dec.reorder(state, idx)
    assert torch.equal(re.h, state.h[idx]) and torch.equal(re.prepared.keys, state.prepared.keys[idx])


def test_greedy_decode_stops_at_eos_and_pads():
    torch.manual_seed(0)
    dec = build_decoder({"name": "lstm", "embed_dim": 8, "hidden_dim": 8, "value_dim": 8},
                        10, 6, {"name": "dot"}).eval()
    with torch.no_grad():
        dec.head.bias.fill_(-100)
        dec.head.bias[2] = 100  # <eos> always wins
    tokens, weights = greedy_decode(dec, torch.randn(4, 3, 6), bos=1, eos=2, max_len=7)
    assert tokens.shape == (4, 1) and (tokens == 2).all() and weights.shape == (4, 1, 3)


def test_shrinking_batch_equals_padded_forward():
    """Skipping padded steps (rows sorted by length) changes nothing where it matters."""
    torch.manual_seed(0)
    dec = build_decoder({"name": "lstm", "embed_dim": 16, "hidden_dim": 16, "value_dim": 8},
                        20, 12, {"name": "additive", "attn_dim": 8}).eval()
    feats, tokens = torch.randn(4, 5, 12), torch.randint(1, 20, (4, 7))
    lengths = torch.tensor([3, 7, 1, 5])
    full, w_full = dec(feats, tokens)
    short, w_short = dec(feats, tokens, lengths=lengths)
    for i, n in enumerate(lengths.tolist()):
        assert torch.allclose(full[i, :n], short[i, :n], atol=1e-5)
        assert torch.allclose(w_full[i, :n], w_short[i, :n], atol=1e-6)
        assert (w_short[i, n:] == 0).all()


def test_captions_sharing_an_image_equal_repeated_features():
    """image_index: keys prepared once per image give what repeating the features would."""
    torch.manual_seed(0)
    dec = build_decoder({"name": "lstm", "embed_dim": 16, "hidden_dim": 16, "value_dim": 8},
                        20, 12, {"name": "dot"}).eval()
    feats, tokens = torch.randn(2, 5, 12), torch.randint(1, 20, (5, 6))
    index, lengths = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([6, 2, 4, 6, 3])
    shared, _ = dec(feats, tokens, lengths=lengths, image_index=index)
    repeated, _ = dec(feats[index], tokens)
    for i, n in enumerate(lengths.tolist()):
        assert torch.allclose(shared[i, :n], repeated[i, :n], atol=1e-5)


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
@pytest.mark.parametrize("name", ["additive", "dot", "linear", "multihead_additive", "local"])
def test_naive_baseline_gives_the_same_outputs(decoder, name):
    """prepare_once=False (keys projected at every step, the benchmark's baseline) changes
    only the speed: same logits in training, same tokens and weights in decoding."""
    torch.manual_seed(0)
    cfg = {"name": decoder, **({"embed_dim": 16, "hidden_dim": 16, "value_dim": 8}
                               if decoder == "lstm" else {"d_model": 16, "num_layers": 2,
                                                          "num_heads": 2, "ff_dim": 32})}
    dec = build_decoder(cfg, 11, DK, {"name": name}).eval()
    feats, tokens = torch.randn(3, 9, DK), torch.randint(0, 11, (3, 5))
    fast = dec(feats, tokens)
    fast_dec = greedy_decode(dec, feats, 1, 2, max_len=6)
    dec.prepare_once = False
    naive = dec(feats, tokens)
    naive_dec = greedy_decode(dec, feats, 1, 2, max_len=6)
    assert torch.allclose(fast[0], naive[0], atol=1e-5) and torch.allclose(fast[1], naive[1], atol=1e-6)
    assert torch.equal(fast_dec[0], naive_dec[0]) and torch.allclose(fast_dec[1], naive_dec[1], atol=1e-6)


@pytest.mark.parametrize("method", ["standard", "pca_whiten"])
def test_normaliser_stays_finite_on_a_channel_dead_in_training(method):
    """A channel that is constant on the training split (a dead ReLU) but fires on a test image
    must give a bounded value, not 1e6 (inf once features are stored as fp16)."""
    from captioning.models import FeatureNormalizer, fit_normalizer

    torch.manual_seed(0)
    train = torch.randn(500, 8) * torch.linspace(0.5, 3, 8)
    train[:, 3] = 0.0  # dead on every training position
    mean, transform = fit_normalizer(train, method, None, eps=0.1)
    norm = FeatureNormalizer(8, transform.shape[1])
    norm.mean.copy_(mean)
    norm.transform.copy_(transform)
    test = torch.randn(1, 4, 8)
    test[..., 3] = 5.0  # it fires here
    out = norm(test).half()
    assert torch.isfinite(out).all() and out.abs().max() < 100
    # On the training split the live channels come out at unit scale, damped below it the
    # more, the smaller their variance (the damping adds 0.1 x the mean variance).
    z = norm(train.unsqueeze(0))[0]
    live = [0, 1, 2, 4, 5, 6, 7] if method == "standard" else list(range(7))
    std = z[:, live].std(0)
    assert (std > 0.5).all() and (std < 1.01).all()


def test_captioner_takes_raw_features_and_normalises_inside():
    """The contract: forward and generate take raw encoder features; the normaliser that
    travels in the checkpoint is applied inside, per batch."""
    from captioning.models import Captioner, FeatureNormalizer

    torch.manual_seed(0)
    dec = build_decoder({"name": "lstm", "embed_dim": 16, "hidden_dim": 16, "value_dim": 8}, 12, 6,
                        {"name": "additive", "attn_dim": 8}).eval()
    norm = FeatureNormalizer(6, 6).set(torch.randn(6), torch.randn(6, 6))
    model = Captioner(dec, norm).eval()
    raw = (torch.randn(3, 4, 6) * 20 + 5).half()  # as stored: float16, far from zero-mean
    tokens = torch.randint(4, 12, (3, 5))
    features = (raw.float() - norm.mean) @ norm.transform  # independent of FeatureNormalizer.forward
    logits, _ = model(raw, tokens)
    assert torch.allclose(logits, dec(features, tokens)[0], atol=1e-5)
    ids, weights = model.generate(raw, 1, 2, 0, max_len=6)
    greedy, _ = greedy_decode(dec, features, 1, 2, max_len=6, banned=(0, 1))  # never <pad>, <bos>
    for row, (k, want) in zip(ids, enumerate(greedy.tolist())):
        n = want.index(2) + 1 if 2 in want else len(want)
        assert row == want[:n] and weights[k].shape == (n, 4)
    # Negative control: feeding already-normalised features is a different input.
    assert not torch.allclose(model(features, tokens)[0], logits, atol=1e-3)
