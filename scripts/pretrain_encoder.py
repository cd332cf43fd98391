"""Train a ResNet from random init on the built-in training images to predict their objects'
attributes (multi-label: colour+shape, size+shape, position), then write it as a torchvision
weights file: the "trained encoder" of the comparison (docs/comparison.md), made without any
download. Every stage trains, BatchNorm included (a from-scratch run needs its statistics);
used later it is frozen like any weights file (encoder.pretrained=true encoder.weights_path=...
encoder.verify_weights=false), and its features are cached under the file's content hash.

    python scripts/pretrain_encoder.py --out data/encoders/resnet50_builtin_attr.pth
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from captioning.data.attribute_targets import LABELS, attribute_labels
from captioning.data.images import ImageFiles
from captioning.data.prepare import load_dataset_records
from captioning.device import configure_cpu
from captioning.errors import ArgumentParser, UserError, report_user_errors
from captioning.models.encoder import ENCODERS, IMAGENET_MEAN, IMAGENET_STD

ROOT = Path(__file__).resolve().parents[1]


class Labelled(Dataset):
    """(image (3, S, S) uint8, multi-hot (len(LABELS),)) for records with objects."""

    def __init__(self, records, size: int) -> None:
        self.records = [r for r in records if r.objects]
        self.files = ImageFiles([r.path for r in self.records], size)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        image, why = self.files[i]
        if why:
            raise ValueError(f"{self.records[i].path}: {why}")
        target = torch.zeros(len(LABELS))
        target[attribute_labels(self.records[i].objects)] = 1.0
        return image, target


def data_config(overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_dir

    from captioning.schema import register

    register()
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, "paths.output_dir=unused"])
    return OmegaConf.to_container(cfg, resolve=True)


def run(net, loader, opt=None, sched=None) -> tuple[float, float, float]:
    """One pass; training when `opt` is given. -> (mean loss, per-label accuracy, share of
    images whose whole label set is right)."""
    net.train(opt is not None)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    loss_sum, right, total, exact = 0.0, 0, 0, 0
    for images, target in loader:
        x = (images.float() / 255 - mean) / std
        with torch.set_grad_enabled(opt is not None):
            logits = net(x.contiguous(memory_format=torch.channels_last))
            loss = F.binary_cross_entropy_with_logits(logits, target)
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        loss_sum += loss.item() * len(images)
        hit = (logits > 0) == (target > 0.5)  # (B, labels)
        right, total, exact = right + int(hit.sum()), total + hit.numel(), exact + int(hit.all(1).sum())
    n = len(loader.dataset)
    return loss_sum / n, right / total, exact / n


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the torchvision weights file to write")
    p.add_argument("--encoder", default="resnet50")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("overrides", nargs="*",
                   help="train.py overrides for the data (e.g. data.synthetic.num_train=96)")
    args = p.parse_args(argv)
    configure_cpu()  # as training does
    cfg = data_config(args.overrides)
    records, _, _ = load_dataset_records(cfg["data"])
    size = cfg["encoder"]["image_size"]
    train = Labelled([r for r in records if r.split == "train"], size)
    val = Labelled([r for r in records if r.split == "val"], size)
    if not len(train):
        raise UserError("no training records with ground-truth objects: this needs the built-in data")
    torch.manual_seed(args.seed)
    net = ENCODERS[args.encoder].builder(weights=None)
    net.fc = torch.nn.Linear(net.fc.in_features, len(LABELS))  # the attribute head
    net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    g = torch.Generator().manual_seed(args.seed)
    loader = DataLoader(train, args.batch, shuffle=True, generator=g, num_workers=1)
    # Cosine decay per step: a from-scratch ResNet at a constant rate can end on an epoch whose
    # BatchNorm statistics do not fit its weights (validation collapses in eval mode).
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=args.epochs * len(loader),
                                                pct_start=0.1)
    history, start, best = [], time.perf_counter(), None
    for epoch in range(args.epochs):
        t = time.perf_counter()
        train_loss, train_acc, _ = run(net, loader, opt, sched)
        val_loss, val_acc, val_exact = run(net, DataLoader(val, 64))
        history.append({"epoch": epoch + 1, "train_loss": train_loss, "train_acc": train_acc,
                        "val_loss": val_loss, "val_acc": val_acc, "val_exact": val_exact,
                        "seconds": time.perf_counter() - t})
        print(json.dumps(history[-1]))
        if best is None or val_loss < best[0]:  # the encoder written is the best epoch's (val loss)
            best = (val_loss, epoch + 1, {k: v.detach().clone() for k, v in net.state_dict().items()})
    net.load_state_dict(best[2])
    # A torchvision state dict: the classifier goes back to the network's own shape (unused:
    # the encoder drops it) so torchvision's constructor loads the file strictly.
    state = {k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}
    state.update({k: v for k, v in ENCODERS[args.encoder].builder(weights=None).state_dict().items()
                  if k.startswith("fc.")})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, out)
    negatives = 1 - float(torch.stack([val[i][1] for i in range(len(val))]).mean()) if len(val) else None
    summary = {"out": str(out), "labels": len(LABELS), "train_images": len(train), "best_epoch": best[1],
               "val_acc_if_all_negative": negatives,  # what per-label accuracy means here
               "minutes": (time.perf_counter() - start) / 60, "history": history}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    print(f"{out}: {args.encoder} trained {args.epochs} epochs on {len(train)} images "
          f"({summary['minutes']:.1f} min), kept epoch {best[1]}: val per-label accuracy "
          f"{history[best[1] - 1]['val_acc']:.3f}, label sets exactly right "
          f"{history[best[1] - 1]['val_exact']:.3f}")
    return summary


if __name__ == "__main__":
    main()
