"""Encoder fine-tuning: only the last K stages change, checkpoints carry them, and every path
(load_checkpoint, evaluate.py, caption.py) captions with the network that was trained."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from captioning import load_checkpoint
from captioning.checkpoint import read_checkpoint
from captioning.data.augment import MIRRORED, augment, draw_generator, mirror_tokens
from captioning.data.sampler import EpochShuffle
from captioning.lit import train
from captioning.models.encoder import ResNetEncoder, build_encoder, build_tunable_encoder, torchvision_state
from captioning.models.encoder_specs import tuning_stages
from captioning.schema import ResNet, completed

ROOT = Path(__file__).resolve().parents[1]
FINETUNE = ["encoder.finetune=true", "trainer.max_epochs=1", "decode.beam_size=1",
            "encoder.finetune_lr=1e-2", "logger=none"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, data_dir):
    """A tiny run with the last stage of a ResNet-18 fine-tuned: (config, run dir)."""
    from conftest import TINY, compose_cfg, shrink

    out = tmp_path_factory.mktemp("finetune")
    cfg = shrink(compose_cfg(TINY + FINETUNE, out, data_dir))
    train(cfg)
    return cfg, out


@pytest.mark.parametrize("stages", [1, 2])
def test_only_the_last_stages_train(stages):
    """A few optimiser steps: the last K stages move; every other parameter and every BatchNorm
    buffer (the trained stages' too) stays bitwise equal."""
    enc = build_tunable_encoder(completed({"name": "resnet18", "finetune_stages": stages}, ResNet))
    before = {k: v.clone() for k, v in {**dict(enc.named_parameters()), **dict(enc.named_buffers())}.items()}
    enc.train()
    opt = torch.optim.AdamW([p for p in enc.parameters() if p.requires_grad], lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        images = torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8, generator=g)
        enc(images).square().mean().backward()
        opt.step()
        opt.zero_grad()
    trained = tuple(f"trunk.{i}." for i in range(8 - stages, 8))  # layer4 = trunk.7, layer3 = 6
    for name, tensor in {**dict(enc.named_parameters()), **dict(enc.named_buffers())}.items():
        changed = not torch.equal(before[name], tensor)
        is_param = name in dict(enc.named_parameters())
        if name.startswith(trained) and is_param and "bn" not in name and "downsample.1" not in name:
            assert changed, f"{name} should have trained"
        elif not is_param:
            assert not changed, f"BatchNorm buffer {name} moved"
        elif not name.startswith(trained):
            assert not changed, f"{name} is frozen but moved"
    assert tuning_stages("resnet18")[-stages:] == ("layer3", "layer4")[2 - stages:]


# Where the last two stages start in each network's trunk, read off torchvision's modules:
# ConvNeXt and Swin: stem, stage1, down+stage2 (2, 3), down+stage3 (4, 5), down+stage4 (6, 7);
# ViT-B/16: the embedding, blocks 1..12, the final norm (index 13, trained with block 12).
LAST_TWO = {"convnext_tiny": (4, "stage3"), "swin_t": (4, "stage3"), "vit_b_16": (11, "block11")}


@pytest.mark.parametrize("name", sorted(LAST_TWO))
def test_the_last_stages_of_convnext_swin_and_vit_train_and_the_rest_stays_fixed(name, tmp_path):
    """finetune_stages=2 on each: only those units move; the frozen ones run in eval mode while the
    encoder trains (their stochastic depth would otherwise drop blocks of fixed features); the
    trained network exported as a torchvision file computes the same features, frozen."""
    enc = build_tunable_encoder(completed({"name": name, "finetune_stages": 2, "image_size": 32}, ResNet))
    split, first = LAST_TWO[name]
    assert enc.split == split and tuning_stages(name)[-2] == first
    before = {k: v.clone() for k, v in enc.named_parameters()}
    enc.train()
    units = list(enc.trunk)
    assert not any(m.training for unit in units[:split] for m in unit.modules())
    assert all(m.training for unit in units[split:] for m in unit.modules())
    opt = torch.optim.AdamW([p for p in enc.parameters() if p.requires_grad], lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        enc(torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8, generator=g)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    tuned = tuple(f"trunk.{i}." for i in range(split, len(enc.trunk)))
    moved = {k for k, v in enc.named_parameters() if not torch.equal(before[k], v)}
    assert moved and all(k.startswith(tuned) for k in moved)
    weights = [k for k in before if k.startswith(tuned) and k.endswith("weight")]
    assert len(moved & set(weights)) > 0.9 * len(weights)  # the tuned units did train
    torch.save(torchvision_state(enc, name), tmp_path / "tuned.pth")
    file = {"pretrained": True, "verify_weights": False, "weights_path": str(tmp_path / "tuned.pth")}
    frozen = build_encoder(completed({"name": name, "image_size": 32, **file}, ResNet)).eval()
    images = torch.rand(2, 3, 32, 32, generator=g)
    with torch.no_grad():
        assert torch.allclose(frozen(images), ResNetEncoder.forward(enc.eval(), images), atol=1e-5)


def test_a_fine_tuned_vit_checkpoint_captions_as_its_run_did(tmp_path, data_dir):
    """encoder=vit_b_16 encoder.finetune=true end to end: the checkpoint carries the tuned blocks
    only, and ImageCaptioner on the test images (the tuned encoder rebuilt around the frozen
    blocks) gives the run's own test captions."""
    from conftest import TINY, compose_cfg, shrink

    from captioning import ImageCaptioner

    cfg = shrink(compose_cfg(TINY + FINETUNE + ["encoder=vit_b_16", "encoder.image_size=32",
                                                "encoder.finetune_stages=1"], tmp_path, data_dir))
    train(cfg)
    ckpt = read_checkpoint(tmp_path / "checkpoints" / "best.ckpt")
    keys = [k for k in ckpt["state_dict"] if k.startswith("model.encoder.")]
    assert keys and all(k.startswith(("model.encoder.trunk.12.", "model.encoder.trunk.13."))
                        or k.endswith("_extra_state") for k in keys)
    listing = json.loads(next(data_dir.glob("synthetic/*/dataset.json")).read_text())
    root = next(data_dir.glob("synthetic/*/dataset.json")).parent
    files = {str(im["imgid"]): root / im["filepath"] / im["filename"] for im in listing["images"]}
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    cap = ImageCaptioner.from_checkpoint(tmp_path / "checkpoints" / "best.ckpt", device="cpu")
    said = [r.caption for r in cap([files[str(p["image_id"])] for p in predictions])]
    assert said == [p["caption"] for p in predictions]


def test_checkpoint_holds_the_trained_stages_and_reproduces_captions(tuned, data_dir):
    cfg, out = tuned
    ckpt = read_checkpoint(out / "checkpoints" / "best.ckpt")
    keys = [k for k in ckpt["state_dict"] if k.startswith("model.encoder.")]
    assert keys and all(k.startswith("model.encoder.trunk.7.") or k.endswith("_extra_state") for k in keys)
    assert ckpt["state_dict"]["model.encoder._extra_state"]["weights_id"].startswith("random-seed0")
    # The tuned stage differs from the network it started from: it trained.
    model, vocab, saved = load_checkpoint(out / "checkpoints" / "best.ckpt")
    fresh = build_encoder(saved["encoder"])
    assert not torch.equal(model.encoder.trunk[7][0].conv1.weight, fresh.trunk[7][0].conv1.weight)
    assert torch.equal(model.encoder.trunk[6][0].conv1.weight, fresh.trunk[6][0].conv1.weight)
    # Captions of the reloaded model == the test predictions of the model as trained.
    from captioning.data.datasets import record_images
    from captioning.data.prepare import usable_data

    data = usable_data(saved["data"], saved["encoder"])
    test = data.split_indices("test")[:6]
    files = record_images(data, saved["encoder"]["image_size"])
    images = torch.stack([files[i][0] for i in test])
    ids, _ = model.generate(model.encode(images), vocab.bos, vocab.eos, vocab.pad, max_len=30)
    said = {data.records[i].image_id: " ".join(vocab.decode(t)) for i, t in zip(test, ids)}
    written = {p["image_id"]: p["caption"] for p in json.loads((out / "predictions.json").read_text())}
    assert said == {k: written[k] for k in said}


def test_caption_script_uses_the_tuned_encoder(tuned):
    """scripts/caption.py on a fine-tuned checkpoint says what the model in memory says."""
    cfg, out = tuned
    model, vocab, saved = load_checkpoint(out / "checkpoints" / "best.ckpt")
    from captioning.data.prepare import usable_data

    data = usable_data(saved["data"], saved["encoder"])
    record = data.records[data.split_indices("test")[0]]
    proc = subprocess.run([sys.executable, "scripts/caption.py", f"checkpoint={out}/checkpoints/best.ckpt",
                           f"image={record.path}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = {p["image_id"]: p["caption"] for p in json.loads((out / "predictions.json").read_text())}
    assert proc.stdout.strip().endswith(f": {written[record.image_id]}")


def test_evaluate_decodes_a_tuned_model_from_images(tuned):
    from captioning.evaluation import evaluate_checkpoint

    cfg, out = tuned
    metrics, predictions, _ = evaluate_checkpoint(out / "checkpoints" / "best.ckpt", "test", meteor=False)
    written = {p["image_id"]: p["caption"] for p in json.loads((out / "predictions.json").read_text())}
    assert {p["image_id"]: p["caption"] for p in predictions} == written


def test_init_from_a_frozen_run_then_fine_tune(tmp_path, data_dir, tiny_cfg):
    """The two-stage recipe: a frozen-encoder run, then init_from it with encoder.finetune; the
    reverse (a tuned checkpoint into a frozen config) is refused with what to set."""
    from captioning.checkpoint import CheckpointError

    frozen = tiny_cfg("trainer.max_epochs=1", "decode.beam_size=1", "logger=none")
    train(frozen)
    ckpt = Path(frozen.paths.output_dir) / "checkpoints" / "best.ckpt"
    second = tiny_cfg(*FINETUNE, f"init_from={ckpt}")
    second.paths.output_dir = str(tmp_path / "second")
    train(second)
    tuned_ckpt = tmp_path / "second" / "checkpoints" / "best.ckpt"
    back = tiny_cfg("trainer.max_epochs=1", f"init_from={tuned_ckpt}", "logger=none")
    back.paths.output_dir = str(tmp_path / "third")
    with pytest.raises(CheckpointError, match="encoder.finetune=true"):
        train(back)


def test_flips_swap_left_and_right_and_draws_repeat():
    """A mirrored image's captions say left for right; the same (seed, epoch, image) gives the
    same crop and flip (a resumed run sees what the killed one would have)."""
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    image[0, :, :8] = 255  # red stripe on the left
    flips = []
    for index in range(40):
        out, mirrored = augment(image, draw_generator(0, 1, index), (1.0, 1.0))
        again, mirrored_again = augment(image, draw_generator(0, 1, index), (1.0, 1.0))
        assert torch.equal(out, again) and mirrored == mirrored_again
        left_red = out[0, :, :8].float().mean() > out[0, :, -8:].float().mean()
        assert left_red != mirrored  # the stripe moved exactly when it says it mirrored
        flips.append(mirrored)
    assert 5 < sum(flips) < 35
    left, right, red = 7, 9, 11
    tokens = torch.tensor([1, red, left, right, 2])
    assert mirror_tokens(tokens, {left: right, right: left}).tolist() == [1, red, right, left, 2]
    assert MIRRORED == {"left": "right", "right": "left"}
    sampler = EpochShuffle(5, seed=0, with_epoch=True)
    sampler.set_epoch(3)
    assert all(epoch == 3 for epoch, _ in sampler) and sorted(k for _, k in sampler) == list(range(5))


def test_export_encoder_gives_a_weights_file_that_runs_like_the_tuned_encoder(tuned, tmp_path):
    """scripts/export_encoder.py: the tuned encoder as a torchvision file; built frozen from it
    (encoder.pretrained=true, weights_path) it computes the tuned encoder's features, and its
    weights id is the file's content hash (the feature store's key)."""
    cfg, out = tuned
    ckpt = out / "checkpoints" / "best.ckpt"
    weights = tmp_path / "tuned.pth"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "export_encoder.py"), str(ckpt), str(weights)],
                   check=True, capture_output=True, text=True)
    model, _, run_cfg = load_checkpoint(ckpt)
    enc = {**run_cfg["encoder"], "pretrained": True, "weights_path": str(weights), "verify_weights": False}
    frozen = build_encoder(enc).eval()
    assert frozen.weights_id.startswith("sha256:")
    images = torch.rand(2, 3, 64, 64)
    with torch.no_grad():  # both in float32 (the tuned encoder's own forward autocasts its frozen part)
        want = ResNetEncoder.forward(model.encoder, images)
        assert torch.allclose(frozen(images), want, atol=1e-5)
        plain = build_encoder({**run_cfg["encoder"], "finetune": False}).eval()
        assert not torch.allclose(plain(images), want, atol=1e-3)  # the trained stage did change


@pytest.mark.parametrize("targets", ["image", "cells"])
def test_pretrain_encoder_writes_a_frozen_usable_weights_file(tmp_path, data_dir, targets):
    """scripts/pretrain_encoder.py on the tiny data, image-level or per-cell targets: a
    torchvision file that the encoder loads as weights (content-hash id) and a summary with the
    learning curve and what its accuracy would be without learning. The file is a function of
    its command on one machine: run again, the same bytes (a grid's pinned encoder file can be
    made again there instead of copied; encoder.weights_sha256 tells where it cannot)."""
    from conftest import TINY

    overrides = [o for o in TINY if o.startswith("data.") or o.startswith("encoder.image_size")]

    def pretrain(out: Path) -> None:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "pretrain_encoder.py"), "--out", str(out),
                        "--encoder", "resnet18", "--epochs", "1", "--batch", "16", "--targets", targets,
                        *overrides, f"paths.data_dir={data_dir}"], check=True, capture_output=True, text=True)

    out = tmp_path / "enc.pth"
    pretrain(out)
    if targets == "cells":  # the same file name: torch.save names the archive's folder after it
        (tmp_path / "again").mkdir()
        pretrain(tmp_path / "again" / "enc.pth")
        assert (tmp_path / "again" / "enc.pth").read_bytes() == out.read_bytes()
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["targets"] == targets and summary["train_images"] == 96 and len(summary["history"]) == 1
    assert 0 <= summary["history"][0]["val_acc"] <= 1
    if targets == "image":
        assert summary["labels"] == 30 and 0.5 < summary["val_acc_if_all_negative"] < 1
    else:  # 64 px: a 2x2 grid; the best constant guess names 1 colour of 5, 1 shape of 3...
        assert summary["grid"] == "2x2" and 0.2 < summary["val_acc_if_constant"] < 0.7
    enc = build_encoder(completed({"name": "resnet18", "pretrained": True, "weights_path": str(out),
                                   "verify_weights": False}, ResNet))
    assert enc.weights_id.startswith("sha256:")


def _pretrain_script():
    import importlib.util

    path = ROOT / "scripts" / "pretrain_encoder.py"
    spec = importlib.util.spec_from_file_location("pretrain_encoder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cell_targets_give_each_cell_what_lies_under_it():
    """A 90 px image, a 3x3 grid of 30 px cells: a red square filling cell (0, 0) exactly and a
    blue circle over the left half of cell (1, 2). Each group's shares sum to 1 in every cell."""
    script = _pretrain_script()
    objects = [{"colour": "red", "shape": "square", "size": "large", "bbox": [0, 0, 30, 30]},
               {"colour": "blue", "shape": "circle", "size": "small", "bbox": [60, 30, 75, 60]}]
    t = script.cell_targets(objects, 90, 3)  # (9, 6 + 4 + 3)
    colours, shapes, sizes = t.split([len(v) + 1 for v in script.CELL_GROUPS.values()], 1)
    red, blue = (list(script.CELL_GROUPS["colour"]).index(c) for c in ("red", "blue"))
    assert colours[0, red] == 1 and colours[0, -1] == 0
    assert colours[5, blue] == pytest.approx(0.5) and colours[5, -1] == pytest.approx(0.5)
    assert shapes[5, script.SHAPES.index("circle")] == pytest.approx(0.5)
    assert sizes[0, script.SIZES.index("large")] == 1
    assert sizes[5, script.SIZES.index("small")] == pytest.approx(0.5)
    empty = [i for i in range(9) if i not in (0, 5)]
    assert (colours[empty, -1] == 1).all() and (shapes[empty, -1] == 1).all()
    for group in (colours, shapes, sizes):
        assert torch.allclose(group.sum(1), torch.ones(9))


def test_the_cell_head_reads_each_cell_alone():
    """The prediction of one cell does not move when another cell's feature changes (a 1x1
    convolution over the last stage): the targets ask each cell for what lies under it."""
    script = _pretrain_script()
    import torchvision

    torch.manual_seed(0)
    model = script.CellHead(torchvision.models.resnet18(), 13).eval()
    feats = torch.randn(1, 512, 3, 3)
    out = model.head(feats).flatten(2).transpose(1, 2)
    moved = feats.clone()
    moved[..., 2, 2] += 5  # the last cell only
    out2 = model.head(moved).flatten(2).transpose(1, 2)
    assert torch.equal(out[:, :8], out2[:, :8]) and not torch.equal(out[:, 8], out2[:, 8])
    assert model(torch.randn(2, 3, 96, 96)).shape == (2, 9, 13)


def test_a_learned_encoders_file_is_named_by_its_sha256_in_records_and_reports(tmp_path):
    """A cell's results.json names its encoder file by sha256 (a random encoder: None), and the
    report's provenance table gets an encoder column only where cells record one (so reports
    of older cells rebuild unchanged)."""
    import hashlib

    from captioning.compare.provenance_table import cell_provenance, provenance_markdown
    from captioning.lit.results import _weights_sha256

    weights = tmp_path / "enc.pth"
    weights.write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()
    assert _weights_sha256({"pretrained": True, "weights_path": str(weights)}) == digest
    assert _weights_sha256({"pretrained": False, "weights_path": None}) is None
    old = {tmp_path / "g" / "cells" / "a": {"git_commit": "abc", "threads": 1, "machine": "m"}}
    assert "encoder" not in provenance_markdown(cell_provenance(old))[0]
    new = {**old, tmp_path / "g" / "cells" / "b": {"git_commit": "abc", "threads": 1, "machine": "m",
                                                   "encoder_sha256": digest}}
    table = provenance_markdown(cell_provenance(new))
    assert "encoder file (sha256)" in table[0] and any(digest in row for row in table[2:])
    assert any("random init" in row for row in table[2:])
