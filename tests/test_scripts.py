"""evaluate.py, score.py and caption.py end to end on a tiny trained checkpoint."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from nltk.translate.bleu_score import corpus_bleu
from PIL import Image
from pycocoevalcap.bleu.bleu import Bleu

from captioning import load_checkpoint
from captioning.data.vocab import tokenize
from captioning.evaluation import evaluate_checkpoint
from captioning.metrics.scoring import score_captions

ROOT = Path(__file__).resolve().parents[1]


def run(script, *args, check=True):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args],
                          capture_output=True, text=True, check=check, cwd=ROOT)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, data_dir):
    from conftest import TINY, compose_cfg, shrink

    from captioning.lit import train

    out = tmp_path_factory.mktemp("run")
    train(shrink(compose_cfg(TINY, out, data_dir)))
    return out


HYPS = {1: "A red circle, on top!", 2: "", 3: "blue", 4: "Le café crème est là."}
REFS = {1: ["a red circle at the top", "a red ball on top ."], 2: ["two squares side by side"],
        3: ["a big blue square in the middle", "blue square"], 4: ["le café crème est là", "un café"]}
TOKENS = {i: [tokenize(r) for r in refs] for i, refs in REFS.items()}


def test_scores_agree_with_nltk_and_pycocoevalcap_on_the_same_tokens():
    metrics, tok = score_captions(HYPS, REFS, TOKENS, prefix="", meteor=False)
    ids = list(HYPS)
    ref = corpus_bleu([[tokenize(r) for r in REFS[i]] for i in ids], [tokenize(HYPS[i]) for i in ids])
    assert metrics["bleu4"] == pytest.approx(ref)
    strip = lambda s: " ".join(w for w in tokenize(s) if w.isalnum() or "'" in w)  # noqa: E731
    coco, _ = Bleu(4).compute_score({i: [strip(r) for r in REFS[i]] for i in ids},
                                    {i: [strip(HYPS[i])] for i in ids}, verbose=0)
    for n in range(4):
        assert metrics[f"coco_bleu{n + 1}"] == pytest.approx(coco[n])
    assert "punctuation removed" in tok["coco"]


def test_score_script_reads_karpathy_and_coco_references(tmp_path):
    preds = [{"image_id": i, "caption": c} for i, c in HYPS.items()]
    (tmp_path / "p.json").write_text(json.dumps(preds))
    karpathy = {"images": [{"cocoid": i, "split": "test", "filename": f"{i}.jpg",
                            "sentences": [{"raw": r} for r in REFS[i]]} for i in REFS]}
    coco = {"annotations": [{"image_id": i, "caption": r} for i in REFS for r in REFS[i]]}
    (tmp_path / "k.json").write_text(json.dumps(karpathy))
    (tmp_path / "c.json").write_text(json.dumps(coco))
    results = []
    for refs in ("k.json", "c.json"):
        out = tmp_path / f"m_{refs}"
        proc = run("score.py", str(tmp_path / "p.json"), str(tmp_path / refs), "--no-meteor",
                   "--json", str(out))
        assert "| BLEU-4 |" in proc.stdout and "CIDEr-D" in proc.stdout
        results.append(json.loads(out.read_text()))
    assert results[0] == results[1]
    direct = score_captions(HYPS, REFS, TOKENS, "", meteor=False)[0]
    assert results[0]["bleu4"] == pytest.approx(direct["bleu4"])
    (tmp_path / "bad.json").write_text(json.dumps({"x": 1}))
    bad = run("score.py", str(tmp_path / "p.json"), str(tmp_path / "bad.json"), check=False)
    assert bad.returncode != 0 and "neither a Karpathy-split JSON" in bad.stderr


def test_evaluate_reproduces_the_run_and_writes_files(run_dir, tmp_path):
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    proc = run("evaluate.py", f"checkpoint={ckpt}", f"output_dir={tmp_path / 'greedy'}", "meteor=false")
    assert "images/s" in proc.stdout and "as training scores" in proc.stdout
    metrics = json.loads((tmp_path / "greedy" / "metrics.json").read_text())
    results = json.loads((run_dir / "results.json").read_text())
    # same decoding, same numbers: one scoring path, CIDEr-D too (coco-caption's beside it)
    for key in ("test/bleu1", "test/bleu4", "test/cider", "test/attr_acc"):
        assert metrics[key] == pytest.approx(results[key], abs=1e-6)
    assert "test/coco_cider" in metrics and "test/coco_cider" not in results
    preds = json.loads((tmp_path / "greedy" / "predictions.json").read_text())
    assert preds == json.loads((run_dir / "predictions.json").read_text())
    # Other decoding settings: the function behind the script (no second interpreter start).
    beam, _, _ = evaluate_checkpoint(ckpt, decode={"beam_size": 3, "alpha": 0.7}, meteor=False)
    assert beam["decode/beam_size"] == 3 and beam["decode/alpha"] == 0.7 and beam["images_per_s"] > 0
    assert {"test/coco_bleu4", "test/cider", "test/coco_cider", "test/rouge_l"} <= set(beam)


def test_evaluate_writes_n_best_lists_and_samples_with_a_seed(run_dir, tmp_path):
    """decode.n_best: predictions_nbest.json, each image's list best first, its head the
    caption in predictions.json; decode.sample: the same seed, the same captions; caption.py
    prints the n best."""
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    out = tmp_path / "nbest"
    run("evaluate.py", f"checkpoint={ckpt}", f"output_dir={out}", "meteor=false", "decode.beam_size=3",
        "decode.n_best=3")
    preds = json.loads((out / "predictions.json").read_text())
    nbest = json.loads((out / "predictions_nbest.json").read_text())
    assert [n["image_id"] for n in nbest] == [p["image_id"] for p in preds] and "nbest" not in preds[0]
    for p, n in zip(preds, nbest):
        scores = [h["score"] for h in n["nbest"]]
        assert n["nbest"][0]["caption"] == p["caption"] and scores == sorted(scores, reverse=True)
        assert 1 <= len(n["nbest"]) <= 3
    sampled = [evaluate_checkpoint(ckpt, decode={"sample": True, "top_k": 3, "seed": s}, meteor=False)[1]
               for s in (5, 5, 6)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]
    Image.new("RGB", (64, 64), (200, 30, 40)).save(tmp_path / "im.png")
    proc = run("caption.py", f"checkpoint={ckpt}", f"image={tmp_path / 'im.png'}", "decode.beam_size=3",
               "decode.n_best=2")
    assert "  1. " in proc.stdout and "  2. " in proc.stdout and "log-prob" in proc.stdout


def test_evaluate_an_ensemble_and_refuse_members_that_do_not_fit(run_dir, tmp_path):
    """evaluate.py 'checkpoint=[a,b]': two copies of one model decode as the model does (the
    mean of equal log-probabilities); a member with another vocabulary or another feature
    setting is refused by name before any decoding."""
    from captioning.checkpoint import read_checkpoint

    ckpt = run_dir / "checkpoints" / "best.ckpt"
    one = json.loads((run_dir / "predictions.json").read_text())
    run("evaluate.py", f"checkpoint=[{ckpt},{ckpt}]", f"output_dir={tmp_path / 'ens'}", "meteor=false")
    assert json.loads((tmp_path / "ens" / "predictions.json").read_text()) == one
    for name, change, says in (
            ("vocab", lambda hp: hp["vocab"].__setitem__(-1, "zebra"), "another vocabulary"),
            ("size", lambda hp: hp["cfg"]["encoder"].update(image_size=96), "encoder.image_size=96")):
        ck = read_checkpoint(ckpt)
        change(ck["hyper_parameters"])
        torch.save(ck, tmp_path / f"{name}.ckpt")
        proc = run("evaluate.py", f"checkpoint=[{ckpt},{tmp_path / f'{name}.ckpt'}]", "meteor=false",
                   check=False)
        assert proc.returncode == 2 and says in proc.stderr + proc.stdout, proc.stderr[-2000:]


def test_evaluate_and_caption_on_the_device_asked_for(run_dir, tmp_path):
    """device=auto is the GPU when there is one (as training), else the CPU: on a CPU machine
    auto and cpu give the same captions; with a GPU, both run (the predictions of cuda may differ
    in the last bits of a beam score, so only their count is compared)."""
    from captioning.caption_files import caption_images
    from captioning.errors import UserError

    ckpt = run_dir / "checkpoints" / "best.ckpt"
    cpu, preds_cpu, _ = evaluate_checkpoint(ckpt, meteor=False, device="cpu")
    auto, preds_auto, _ = evaluate_checkpoint(ckpt, meteor=False, device="auto")
    assert cpu["device"] == "cpu" and auto["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        assert preds_auto == preds_cpu
    assert len(preds_auto) == len(preds_cpu)
    Image.new("RGB", (64, 64), (200, 30, 40)).save(tmp_path / "im.png")
    on_cpu, _ = caption_images(ckpt, tmp_path / "im.png", device="cpu")
    on_auto, _ = caption_images(ckpt, tmp_path / "im.png", device="auto")
    assert on_cpu[0]["caption"] and (torch.cuda.is_available() or on_auto == on_cpu)
    for bad, says in (("gpu0", "not a device name"), ("cuda:7", "cuda")):
        if bad == "cuda:7" and torch.cuda.device_count() > 7:
            continue
        with pytest.raises(UserError, match=says):
            evaluate_checkpoint(ckpt, meteor=False, device=bad)


def test_caption_script_figures_and_skips(run_dir, tmp_path):
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    images = tmp_path / "imgs"
    images.mkdir()
    for k in range(2):
        Image.new("RGB", (64, 64), (200, 30 * k, 40)).save(images / f"im{k}.png")
    (images / "notes.txt").write_text("not an image")
    proc = run("caption.py", f"checkpoint={ckpt}", f"image={images}",
               f"attention_map={tmp_path / 'att.png'}")
    assert "skipped" in proc.stdout and "notes.txt" in proc.stdout
    lines = [x for x in proc.stdout.splitlines() if x.startswith(str(images / "im"))]
    assert len(lines) == 2
    for k, line in enumerate(lines):
        words = line.split(": ", 1)[1].split("  -> ")[0].split()
        png = tmp_path / f"att_im{k}.png"
        width, height = Image.open(png).size
        panels = len(words) + 1  # the input panel + one panel per word, 5 a row, + colour bar
        cols, rows = min(5, panels), math.ceil(panels / 5)
        assert width == pytest.approx((2.4 * cols + 0.9) * 80, abs=1)
        assert height == pytest.approx((2.5 * rows + 0.5) * 80, abs=1)


def test_clear_errors_for_missing_and_incompatible_checkpoints(run_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "nope.ckpt")
    ckpt = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    ckpt["hyper_parameters"]["format_version"] = 99
    torch.save(ckpt, tmp_path / "old.ckpt")
    with pytest.raises(ValueError, match="written by captioning format 99.*reads captioning format 1"):
        load_checkpoint(tmp_path / "old.ckpt")
    proc = run("caption.py", f"checkpoint={tmp_path / 'nope.ckpt'}", f"image={tmp_path}", check=False)
    assert proc.returncode != 0 and "checkpoint not found" in proc.stderr


def test_ddp_two_cpu_processes_equal_one_process_on_the_same_checkpoint(tmp_path):
    """Lightning DDP (gloo, 2 processes), cold cache, 25 test images (odd: the sampler pads):
    features are extracted once; one run dir, one checkpoint set, one results.json; validation
    and test scores (BLEU and attention statistics) equal one process decoding the same
    checkpoint: every image decoded and counted exactly once."""
    import csv

    import torch
    from conftest import TINY

    from captioning.evaluation import evaluate_checkpoint
    from captioning.models.attention import attention_stats
    from captioning.predict import Predictor

    data, run = tmp_path / "data", tmp_path / "run"
    args = [a for a in TINY if not a.startswith("logger=")] + [
        "trainer=ddp", "trainer.accelerator=cpu", "trainer.max_epochs=1",  # the preset: 2 processes
        "decoder.embed_dim=32", "decoder.hidden_dim=32", "logger=csv", "decode.beam_size=2",
        "data.synthetic.num_test=25", f"paths.data_dir={data}", f"hydra.run.dir={run}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), *args], check=True, cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert log.count("features: extracting") == 1, log[-3000:]  # one rank built, one waited
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert len(list(tmp_path.rglob("results.json"))) == 1
    results = json.loads((run / "results.json").read_text())
    preds = json.loads((run / "predictions.json").read_text())
    assert len(preds) == 25 and len({p["image_id"] for p in preds}) == 25

    best = run / "checkpoints" / "best.ckpt"
    one, one_preds, _ = evaluate_checkpoint(best, "test", meteor=False)
    assert one_preds == preds
    assert one["test/bleu4"] == pytest.approx(results["test/bleu4"], abs=1e-12)
    predictor = Predictor.load(best)
    from captioning.data.prepare import usable_data

    features = usable_data(predictor.cfg["data"], predictor.cfg["encoder"])
    for split, stage in (("test", results), ("val", None)):
        indices = features.split_indices(split)
        if stage is None:  # validation: greedy, logged to metrics.csv by the 2 ranks
            predictor = Predictor.load(best, {"beam_size": 1})
            rows = list(csv.DictReader((run / "csv" / "metrics.csv").open()))
            stage = {k: float(v) for r in rows for k, v in r.items() if k.startswith("val/") and v}
            val, _, _ = evaluate_checkpoint(best, "val", {"beam_size": 1}, meteor=False)
            assert val["val/bleu4"] == pytest.approx(stage["val/bleu4"], rel=1e-6)  # float32 log
        captions = predictor(features.raw_features(indices))
        stats = attention_stats(torch.cat([c.steps for c in captions]))
        prefix = split + "/"
        for key, value in stats.items():
            assert stage[prefix + key] == pytest.approx(value, rel=1e-5), key
