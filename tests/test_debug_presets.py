"""The first hour: debug presets, the demo preset, the per-epoch console line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from captioning.lit import train

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["encoder=resnet18", "encoder.image_size=64", "encoder.num_workers=0",
         "data.synthetic.image_size=64", "logger=none", "trainer.enable_progress_bar=false"]


@pytest.mark.parametrize("preset", ["debug=fast", "debug=overfit", "debug=profile", "experiment=demo"])
def test_presets_compose_and_pass_the_config_check(preset, tmp_path):
    from conftest import compose_cfg

    from captioning.lit.config_check import check_config

    cfg = compose_cfg([preset], tmp_path, tmp_path)
    check_config(OmegaConf.to_container(cfg, resolve=True))


def test_overfit_memorises_its_training_captions(tmp_path):
    """debug=overfit: greedy decoding reproduces the training captions (150 epochs on 8 captions:
    most of them, whatever the CPU), and far more of them than of unseen images' captions (the
    control: memorised, not learned)."""
    from conftest import compose_cfg, shrink

    from captioning import load_checkpoint
    from captioning.data.prepare import prepare_data

    cfg = shrink(compose_cfg(SMALL + ["debug=overfit"], tmp_path / "run", tmp_path / "data"))
    train(cfg)
    model, vocab, saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    data = prepare_data(saved["data"], saved["encoder"])
    images = data.split_indices("train")
    assert len(images) == 8
    ids, _ = model.generate(data.raw_features(images), vocab.bos, vocab.eos, vocab.pad, max_len=30)
    said = [vocab.decode(t) for t in ids]
    wanted = [data.records[i].captions[0] for i in images]  # the one caption it trained on
    exact = sum(a == b for a, b in zip(said, wanted)) / len(images)
    unseen = data.split_indices("val")
    ids, _ = model.generate(data.raw_features(unseen), vocab.bos, vocab.eos, vocab.pad, max_len=30)
    held_out = sum(vocab.decode(t) in data.records[i].captions for t, i in zip(ids, unseen)) / len(unseen)
    assert exact >= 0.75 and exact > held_out, (list(zip(said, wanted)), held_out)


def test_the_console_shows_each_validation_epoch(tmp_path, data_dir):
    """A tiny run's console output: one line per validation epoch with the score and the best."""
    from conftest import TINY

    args = [a for a in TINY if not a.startswith("trainer.max_epochs")] + [
        "trainer.max_epochs=2", "decoder.embed_dim=32", "decoder.hidden_dim=32", "decode.beam_size=1",
        f"paths.data_dir={data_dir}", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "epoch 1/2: val/bleu4 " in out and "(new best)" in out
    assert "epoch 2/2: val/bleu4 " in out and "val/attr_acc" in out
    # The final summary: our table (float64 scores, files), not Lightning's float32 one.
    summary = out[out.index("summary: additive-lstm-"):]
    labels = ("test BLEU-1..4", "test CIDEr-D", "attribute acc", "grounding", "best checkpoint", "results")
    for label in labels:
        assert f"  {label}" in summary, summary
    assert f"{tmp_path}/results.json" in summary and "Test metric" not in out
    bleu4 = float(summary.split("test BLEU-1..4")[1].split()[3])
    import json

    assert bleu4 == round(json.loads((tmp_path / "results.json").read_text())["test/bleu4"], 4)


def test_data_generation_shows_a_progress_bar(tmp_path, capsys):
    from captioning.data.synthetic import SyntheticConfig, generate

    generate(tmp_path, SyntheticConfig(num_train=3, num_val=1, num_test=1, image_size=64))
    err = capsys.readouterr().err
    assert "dataset: 100%" in err and "5/5" in err and "img/s" in err


def test_limited_batches_read_and_extract_only_the_images_they_reach(tmp_path):
    """trainer.limit_*_batches as ints (the debug presets): each limited split is cut to its first
    batches x batch size images, so the store extracts only those; evaluation splits are read in
    order, so the test stage captions exactly the images its limited batches always gave."""
    from conftest import TINY, compose_cfg, shrink

    from captioning.data.prepare import load_dataset_records
    from captioning.lit.datamodule import images_reached

    fast = OmegaConf.to_container(compose_cfg(["debug=fast"], tmp_path, tmp_path), resolve=True)
    assert images_reached(fast["trainer"], fast["data"]) == {"train": 5 * 24, "val": 2 * 200, "test": 2 * 200}
    assert images_reached({"limit_train_batches": 0.5, "devices": 1}, fast["data"]) == {}
    assert images_reached({"fast_dev_run": True, "devices": 2}, fast["data"]) == {
        "train": 2 * 24, "val": 2 * 200, "test": 2 * 200}
    limits = ["trainer.max_epochs=2", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
              "trainer.limit_test_batches=1"]
    cfg = shrink(compose_cfg([o for o in TINY if "max_epochs" not in o] + limits, tmp_path / "run",
                             tmp_path / "data"))
    train(cfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    batch, evaluated = plain["data"]["batch_size"], plain["data"]["eval_batch_size"]
    stores = [json.loads(p.read_text()) for p in (tmp_path / "data" / "cache").glob("store_*/manifest.json")]
    num_val = plain["data"]["synthetic"]["num_val"]
    splits = {"train": 2 * batch, "val": min(evaluated, num_val), "test": evaluated}
    assert [s["rows"] for s in stores] == [sum(splits.values())]  # of 96 + 12 + 24 images
    records = load_dataset_records(plain["data"])[0]
    first_test = [str(r.image_id) for r in records if r.split == "test"][:evaluated]
    predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
    assert [str(p["image_id"]) for p in predictions] == first_test
    # the vocabulary is the whole training split's, so the run's checkpoint fits a full run's
    from captioning import load_checkpoint
    from captioning.data.vocab import Vocabulary

    _, vocab, _ = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    whole = Vocabulary.build((c for r in records if r.split == "train" for c in r.captions),
                             plain["data"]["min_word_freq"])
    assert vocab.itos == whole.itos
