"""Decoding from packed linear weights (models/cpu_speed/packed.py): the same products as F.linear, the
modules restored, and only where it is safe (no gradients, no compiled forwards)."""

import pytest
import torch
from torch import nn

from captioning.models import build_decoder, greedy_decode
from captioning.models.cpu_speed import packed
from captioning.models.cpu_speed.packed import _PackedForward, available, packed_linears, packs_in

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no oneDNN packed linear")


def _decoder(vocab: int = 50) -> nn.Module:
    torch.manual_seed(0)
    cfg = {"name": "lstm", "embed_dim": 32, "hidden_dim": 32, "value_dim": 32}
    return build_decoder(cfg, vocab, 48, {"name": "additive"}).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_products_match_f_linear(dtype):
    torch.manual_seed(0)
    lin = nn.Linear(64, 300)
    x = torch.randn(2, 5, 64)
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        ref = lin(x)
        with packed_linears(lin):
            assert isinstance(lin.__dict__.get("forward"), _PackedForward)
            out = lin(x)
            # packed once, in the dtype the call ran in (where this CPU's oneDNN packs it)
            assert lin.forward.packs.keys() == ({dtype} if packs_in(dtype) else set())
    assert out.dtype == ref.dtype == dtype and out.shape == (2, 5, 300)
    torch.testing.assert_close(out.float(), ref.float(), **tol)
    assert (out.float() - ref.float()).abs().max() < 0.05 * ref.float().abs().max()


def test_a_packed_bias_free_layer_and_an_empty_batch():
    lin = nn.Linear(16, 8, bias=False)
    with torch.no_grad(), packed_linears(lin):
        assert lin(torch.zeros(0, 16)).shape == (0, 8)
        torch.testing.assert_close(lin(torch.eye(16)), lin.weight.t())


def test_modules_are_restored_even_after_an_error():
    dec = _decoder()
    with torch.no_grad(), pytest.raises(RuntimeError, match="boom"):
        with packed_linears(dec):
            assert all("forward" in m.__dict__ for m in dec.modules() if isinstance(m, nn.Linear))
            raise RuntimeError("boom")
    assert not any("forward" in m.__dict__ for m in dec.modules())


def test_not_applied_with_gradients_compiled_forwards_or_an_opt_out():
    dec = _decoder()
    with packed_linears(dec):  # gradients on: the packed product has no backward
        assert not any("forward" in m.__dict__ for m in dec.modules())
    with torch.no_grad():
        dec.attention.forward = dec.attention.forward  # as model.compile replaces a forward
        with packed_linears(dec):
            assert "forward" not in dec.head.__dict__
        del dec.attention.forward
        dec.pack_linears = False
        with packed_linears(dec):
            assert "forward" not in dec.head.__dict__
        del dec.pack_linears
        torch.backends.mkldnn.enabled = False  # the user's switch
        try:
            with packed_linears(dec):
                assert "forward" not in dec.head.__dict__
        finally:
            torch.backends.mkldnn.enabled = True
        with packed_linears(dec):
            inner = dec.head.forward
            with packed_linears(dec):  # nested: the outer packing stays
                assert dec.head.forward is inner
            assert dec.head.forward is inner


def test_a_call_with_gradients_inside_the_block_uses_f_linear():
    lin = nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with torch.no_grad(), packed_linears(lin):
        with torch.enable_grad():
            y = lin(x)
        assert y.requires_grad and not lin.forward.packs


def test_weights_are_read_at_their_first_use_in_the_block():
    lin = nn.Linear(4, 4)
    with torch.no_grad(), packed_linears(lin):
        lin.weight.copy_(torch.eye(4))
        lin.bias.zero_()
        x = torch.randn(2, 4)
        torch.testing.assert_close(lin(x), x)


@pytest.mark.parametrize("autocast", [False, True])
def test_greedy_decoding_packs_and_matches_the_unpacked_logits(autocast):
    dec = _decoder()
    feats = torch.randn(3, 6, 48)
    seen = []
    original = _PackedForward.__call__

    def spy(self, x):
        seen.append(self.linear)
        return original(self, x)

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        _PackedForward.__call__ = spy
        try:
            tokens, weights = greedy_decode(dec, feats, 1, 2, 6)
        finally:
            _PackedForward.__call__ = original
        assert dec.head in seen and dec.attention.w_query in seen
        assert not any("forward" in m.__dict__ for m in dec.modules())
        with torch.no_grad():  # one step's logits, packed against F.linear
            state = dec.init_state(dec.prepare(feats), feats)
            start = torch.ones(3, dtype=torch.long)
            ref = dec.step(start, state)[0].float()
            with packed_linears(dec):
                out = dec.step(start, state)[0].float()
    tol = 0.05 if autocast else 1e-4
    assert (out - ref).abs().max() <= tol * ref.abs().max()
    assert tokens.shape == (3, 6) and weights.shape == (3, 6, 6)


def test_a_dtype_this_cpu_cannot_pack_keeps_f_linear(monkeypatch):
    # oneDNN refuses bf16 on AVX2-only CPUs: decoding there must run as before, not fail.
    monkeypatch.setattr(packed, "packs_in", lambda dtype: dtype != torch.bfloat16)
    lin = nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ref = lin(x)
        with packed_linears(lin):
            out = lin(x)
            assert not lin.forward.packs
    assert torch.equal(out, ref)


def test_the_capability_probe_says_no_when_onednn_refuses(monkeypatch):
    def refuse(*args):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx512bw")

    packs_in.cache_clear()
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    try:
        assert packs_in(torch.bfloat16) is False
    finally:
        packs_in.cache_clear()
