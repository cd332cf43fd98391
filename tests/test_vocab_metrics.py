import pytest
from nltk.translate.bleu_score import corpus_bleu

from captioning.data.vocab import SPECIALS, Vocabulary, tokenize
from captioning.metrics import attribute_accuracy, corpus_bleu_scores, parse_attributes


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("A Dog, running!") == ["a", "dog", ",", "running", "!"]
    assert tokenize("Le café's crème") == ["le", "café's", "crème"]
    assert tokenize("") == []


def test_vocab_min_freq_specials_and_round_trip():
    caps = [["a", "red", "circle"], ["a", "blue", "circle"], ["a", "rare"]]
    v = Vocabulary.build(caps, min_freq=2)
    assert v.itos[:4] == list(SPECIALS)
    assert v.itos[4:] == ["a", "circle"]  # by frequency, rare words dropped
    ids = v.encode(["a", "red", "circle"])
    assert ids[0] == v.bos and ids[-1] == v.eos and ids[2] == v.unk
    assert v.decode(ids) == ["a", "<unk>", "circle"]
    assert v.decode([v.bos, v.stoi["a"], v.eos, v.stoi["circle"]]) == ["a"]  # stops at <eos>
    with pytest.raises(ValueError, match="must start with"):
        Vocabulary(["a", "b"])


def test_decode_aligned_keeps_the_weight_rows_of_real_words():
    import torch

    v = Vocabulary([*SPECIALS, "a", "red", "circle"])
    a, red, circle = (v.stoi[w] for w in ("a", "red", "circle"))
    ids = [a, v.pad, red, v.bos, circle, v.eos, a]  # a greedy decoder may emit <pad>/<bos>
    weights = torch.arange(7.0)[:, None]  # (7, 1): row t = t
    words, w = v.decode_aligned(ids, weights)
    assert words == v.decode(ids) == ["a", "red", "circle"]
    assert w.flatten().tolist() == [0.0, 2.0, 4.0]  # not rows 0..2


def test_bleu_matches_nltk_and_scale():
    refs = [[["a", "red", "circle", "at", "the", "top"], ["a", "red", "ball", "on", "top"]],
            [["two", "blue", "squares", "side", "by", "side"]]]
    hyps = [["a", "red", "circle", "on", "top"], ["two", "blue", "squares", "side", "by", "side"]]
    ours = corpus_bleu_scores(hyps, refs, prefix="test/")
    assert ours["test/bleu4"] == pytest.approx(corpus_bleu(refs, hyps))
    assert ours["test/bleu1"] == pytest.approx(corpus_bleu(refs, hyps, weights=(1.0,)))
    perfect = corpus_bleu_scores([r[0] for r in refs], refs)
    assert perfect["bleu4"] == pytest.approx(1.0)
    assert corpus_bleu_scores([["zzz"], ["yyy"]], refs)["bleu4"] == 0.0
    with pytest.raises(ValueError):
        corpus_bleu_scores(hyps[:1], refs)


OBJ = {"colour": "red", "shape": "circle", "size": "large", "position": "top left"}


@pytest.mark.parametrize(
    "caption, joint",
    [
        ("a big red circle in the upper left", 1.0),
        ("a red circle at the top left", 1.0),
        ("a red circle at the top", 0.0),  # wrong position (top center)
        ("a red blue circle at the top left", 0.0),  # two colours named
        ("a red circle and a square at the top left", 0.0),  # two shapes named
        ("a red circle at the top left and on the right", 0.0),  # two positions
        ("a red thing", 0.0),
    ],
)
def test_attribute_scorer_cases(caption, joint):
    assert attribute_accuracy([caption.split()], [[OBJ]])["attr_acc"] == joint


def test_attribute_scorer_blind_model_and_multi_object_images():
    objs = [[{**OBJ, "colour": c, "position": p}] for c in ("red", "green", "blue")
            for p in ("top left", "center", "bottom right")]
    blind = [["a", "small", "purple", "triangle", "in", "the", "middle", "left"]] * len(objs)
    assert attribute_accuracy(blind, objs)["attr_acc"] == 0.0
    assert attribute_accuracy([["x"]], [[OBJ, OBJ]]) == {}  # only single-object images count
    assert parse_attributes("in the lower middle".split())["position"] == {"bottom center"}
