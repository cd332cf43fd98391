"""One tokenisation path: for the same predictions, nltk BLEU in results.json, in
scripts/score.py and in the comparison report's statistics is the same number, on
Karpathy-style captions with capitals, punctuation and hyphenated words."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nltk.translate.bleu_score import corpus_bleu
from PIL import Image

from captioning.compare.report import _load
from captioning.data.karpathy import load_karpathy
from captioning.data.vocab import tokenize
from captioning.lit import train
from captioning.metrics.stats import bleu_from_stats, bleu_stats

ROOT = Path(__file__).resolve().parents[1]
RAW = ["A man in a T-shirt, smiling.", "A man in a T-shirt is smiling!", "The man's T-shirt: red."]


def _karpathy_tokens(raw: str) -> list[str]:
    """Like Karpathy's files: lower case, punctuation gone, hyphenated words kept whole."""
    return [w.strip(".,!:").lower() for w in raw.split()]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("karpathy")
    (root / "images").mkdir()
    rng = np.random.default_rng(0)
    images = []
    for i in range(36):
        Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).save(root / "images" / f"{i}.jpg")
        split = "train" if i < 24 else "restval" if i < 26 else "val" if i < 30 else "test"
        sentences = [{"raw": RAW[0], "tokens": _karpathy_tokens(RAW[0])},  # tokens win
                     {"raw": RAW[(i % 2) + 1]}]  # raw only: tokenised by the project
        images.append({"filename": f"{i}.jpg", "filepath": "images", "split": split, "imgid": i,
                       "sentences": sentences})
    (root / "dataset_x.json").write_text(json.dumps({"images": images}))
    return root


def test_results_score_script_and_report_agree(dataset, tmp_path):
    from conftest import TINY, compose_cfg, shrink

    tiny = [o for o in TINY if not o.startswith("data.")] + [
        "data=flickr8k", "encoder.pretrained=false", f"data.json_path={dataset / 'dataset_x.json'}",
        f"data.image_root={dataset}", f"data.cache_dir={tmp_path / 'cache'}", "data.min_word_freq=1",
        "data.batch_size=4", "data.eval_batch_size=16", "trainer.max_epochs=3", "decode.beam_size=1",
    ]
    out = tmp_path / "run"
    results = train(shrink(compose_cfg(tiny, out, tmp_path)))

    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "score.py"), str(out / "predictions.json"),
         str(dataset / "dataset_x.json"), "--split", "test", "--no-meteor",
         "--json", str(tmp_path / "s.json")],
        capture_output=True, text=True, check=True, cwd=ROOT)
    scored = json.loads((tmp_path / "s.json").read_text())

    # The comparison report: references from the reader, hypotheses from predictions.json.
    refs = {r.image_id: r.captions for r in load_karpathy(dataset / "dataset_x.json") if r.split == "test"}
    _, hyps = _load(out)
    stats = np.stack([bleu_stats(hyps[i], refs[i]) for i in sorted(refs)]).sum(0)
    report_bleu4 = float(bleu_from_stats(stats))

    for n in range(1, 5):
        assert scored[f"bleu{n}"] == pytest.approx(results[f"test/bleu{n}"], abs=1e-9), (n, proc.stdout)
    assert report_bleu4 == pytest.approx(results["test/bleu4"], abs=1e-9)

    # The same agreement on predictions that do not depend on what training reached on this
    # CPU: half the test images captioned exactly (Karpathy tokens of RAW[0]), half partly.
    fixed = {i: " ".join(_karpathy_tokens(RAW[0])[: 8 if n % 2 else 5]) for n, i in enumerate(sorted(refs))}
    predictions = [{"image_id": i, "caption": c} for i, c in fixed.items()]
    (tmp_path / "fixed.json").write_text(json.dumps(predictions))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), str(tmp_path / "fixed.json"),
                    str(dataset / "dataset_x.json"), "--split", "test", "--no-meteor",
                    "--json", str(tmp_path / "f.json")], capture_output=True, text=True, check=True, cwd=ROOT)
    fixed_scored = json.loads((tmp_path / "f.json").read_text())
    fixed_hyps = [tokenize(fixed[i]) for i in sorted(refs)]  # as score.py and the report read them
    stats = np.stack([bleu_stats(h, refs[i]) for h, i in zip(fixed_hyps, sorted(refs))]).sum(0)
    assert 0 < fixed_scored["bleu4"] == pytest.approx(float(bleu_from_stats(stats)), abs=1e-9)
    # Negative control: references tokenised from the raw text (punctuation kept, the
    # Karpathy tokens ignored), as score.py used to, give another number.
    raw_refs = [[tokenize(RAW[0]), tokenize(RAW[(i % 2) + 1])] for i in sorted(refs)]
    assert abs(corpus_bleu(raw_refs, fixed_hyps) - fixed_scored["bleu4"]) > 1e-3
