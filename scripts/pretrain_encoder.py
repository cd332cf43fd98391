"""Train a ResNet from random init on the built-in training images, then write it as a
torchvision weights file: a learned encoder for the comparison (docs/comparison.md), made without
any download. Two kinds of target (--targets):

- image: which attributes the image's objects have (multi-label: colour+shape, size+shape,
  position), read from the pooled feature. Every cell of the last stage learns to carry the
  whole image's answer, so a decoder can read any cell: attention has nothing left to choose.
- cells: what lies under each cell of the last stage's grid (colour, shape and size of the
  object covering it, in proportion to the area it covers, or nothing), read by a 1x1
  convolution from each cell alone. The features stay local, as ImageNet features are spatial.

Every stage trains, BatchNorm included (a from-scratch run needs its statistics); used later it
is frozen like any weights file (encoder.pretrained=true encoder.weights_path=...
encoder.verify_weights=false), and its features are cached under the file's content hash.

    python scripts/pretrain_encoder.py --out data/encoders/resnet50_builtin_attr.pth
    python scripts/pretrain_encoder.py --targets cells --out data/encoders/resnet50_builtin_cells.pth
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from captioning.data.attribute_targets import LABELS, attribute_labels
from captioning.data.images import ImageFiles
from captioning.data.prepare import load_dataset_records
from captioning.data.synthetic import COLOURS, SHAPES, SIZES
from captioning.device import resolve_device
from captioning.errors import ArgumentParser, UserError, report_user_errors
from captioning.metrics.grounding import box_cells
from captioning.models.cpu_speed import configure_cpu
from captioning.models.encoder_specs import ENCODERS, IMAGENET_MEAN, IMAGENET_STD, grid_cells

# The per-cell targets: each attribute's values, then "nothing" (the background's share).
CELL_GROUPS = {"colour": tuple(COLOURS), "shape": SHAPES, "size": SIZES}

ROOT = Path(__file__).resolve().parents[1]


def cell_targets(objects: list[dict], image_size: float, side: int) -> torch.Tensor:
    """What lies under each cell of a side x side grid over the image: per cell, for each of
    CELL_GROUPS a distribution over its values and "nothing", each object's value weighted by
    the share of the cell its box covers (objects never overlap), the rest "nothing".
    -> (side * side, sum of (len(values) + 1)) row-major like the features; each group's
    columns sum to 1."""
    parts = []
    for key, values in CELL_GROUPS.items():
        dist = torch.zeros(side * side, len(values) + 1)
        for o in objects:
            dist[:, values.index(o[key])] += box_cells(o["bbox"], image_size, side)
        dist[:, -1] = (1 - dist[:, :-1].sum(1)).clamp_min(0)
        parts.append(dist)
    return torch.cat(parts, 1)


class Labelled(Dataset):
    """(image (3, S, S) uint8, target) for records with objects: a multi-hot (len(LABELS),)
    of the image's attributes, or with cells=(image_size, side) its cell_targets."""

    def __init__(self, records, size: int, cells: tuple[float, int] | None = None) -> None:
        self.records = [r for r in records if r.objects]
        self.files = ImageFiles([r.path for r in self.records], size)
        self.cells = cells

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        image, why = self.files[i]
        if why:
            raise ValueError(f"{self.records[i].path}: {why}")
        if self.cells:
            return image, cell_targets(self.records[i].objects, *self.cells)
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


class CellHead(torch.nn.Module):
    """A ResNet's stages, then a 1x1 convolution per cell of the last stage's grid: each
    cell's prediction reads that cell's feature alone. Shares its modules with `net`, whose
    state dict is the file written."""

    def __init__(self, net: torch.nn.Module, outputs: int) -> None:
        super().__init__()
        self.trunk = torch.nn.Sequential(*list(net.children())[:-2])  # conv1 .. layer4
        self.head = torch.nn.Conv2d(net.fc.in_features, outputs, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x)).flatten(2).transpose(1, 2)  # (B, side*side, outputs)


def cell_loss(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits, target (B, cells, outputs) -> (soft cross-entropy summed over CELL_GROUPS, mean
    over cells; hits and counted, (B, cells, groups): in a cell some object covers, whether the
    most likely value other than "nothing" is the one covering most of it)."""
    loss, hits, counted, at = 0.0, [], [], 0
    for values in CELL_GROUPS.values():
        k = len(values) + 1
        lg, tg = logits[..., at:at + k], target[..., at:at + k]
        loss = loss - (tg * F.log_softmax(lg, -1)).sum(-1).mean()
        hits.append(lg[..., :-1].argmax(-1) == tg[..., :-1].argmax(-1))
        counted.append(tg[..., :-1].sum(-1) > 0)
        at += k
    return loss, torch.stack(hits, -1), torch.stack(counted, -1)


def run(net, loader, opt=None, sched=None) -> tuple[float, float, float]:
    """One pass; training when `opt` is given. -> (mean loss, accuracy per label (image
    targets) or per covered cell and attribute (cell targets), share of images entirely right)."""
    net.train(opt is not None)
    device = next(net.parameters()).device
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
    loss_sum, right, total, exact = 0.0, 0, 0, 0
    for images, target in loader:
        images, target = images.to(device), target.to(device)
        x = (images.float() / 255 - mean) / std
        with torch.set_grad_enabled(opt is not None):
            logits = net(x.contiguous(memory_format=torch.channels_last))
            if isinstance(net, CellHead):
                loss, hit, counted = cell_loss(logits, target)
            else:
                loss = F.binary_cross_entropy_with_logits(logits, target)
                hit = (logits > 0) == (target > 0.5)  # (B, labels)
                counted = torch.ones_like(hit)
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        loss_sum += loss.item() * len(images)
        hit, counted = hit.flatten(1), counted.flatten(1)
        right, total = right + int((hit & counted).sum()), total + int(counted.sum())
        exact += int((hit | ~counted).all(1).sum())
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
    p.add_argument("--device", default="auto", help="auto (a GPU where there is one), cpu, cuda, cuda:N")
    p.add_argument("--targets", choices=["image", "cells"], default="image",
                   help="image: the image's attributes from the pooled feature; cells: what lies "
                        "under each cell of the last stage, from that cell alone")
    p.add_argument("overrides", nargs="*",
                   help="train.py overrides for the data (e.g. data.synthetic.num_train=96)")
    args = p.parse_args(argv)
    configure_cpu()  # as training does
    cfg = data_config(args.overrides)
    records, _, _ = load_dataset_records(cfg["data"])
    size = cfg["encoder"]["image_size"]
    # cell targets: the generated images' own pixel size (the boxes'), the encoder's grid side
    cells = None
    if args.targets == "cells":
        cells = (cfg["data"]["synthetic"]["image_size"], math.isqrt(grid_cells(size)))
    train = Labelled([r for r in records if r.split == "train"], size, cells)
    val = Labelled([r for r in records if r.split == "val"], size, cells)
    if not len(train):
        raise UserError("no training records with ground-truth objects: this needs the built-in data")
    torch.manual_seed(args.seed)
    net = ENCODERS[args.encoder].builder(weights=None)
    if cells:
        model = CellHead(net, sum(len(v) + 1 for v in CELL_GROUPS.values()))
    else:
        net.fc = torch.nn.Linear(net.fc.in_features, len(LABELS))  # the attribute head
        model = net
    model = model.to(resolve_device(args.device), memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    g = torch.Generator().manual_seed(args.seed)
    loader = DataLoader(train, args.batch, shuffle=True, generator=g, num_workers=1)
    # Cosine decay per step: a from-scratch ResNet at a constant rate can end on an epoch whose
    # BatchNorm statistics do not fit its weights (validation collapses in eval mode).
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=args.epochs * len(loader),
                                                pct_start=0.1)
    history, start, best = [], time.perf_counter(), None
    for epoch in range(args.epochs):
        t = time.perf_counter()
        train_loss, train_acc, _ = run(model, loader, opt, sched)
        val_loss, val_acc, val_exact = run(model, DataLoader(val, 64))
        history.append({"epoch": epoch + 1, "train_loss": train_loss, "train_acc": train_acc,
                        "val_loss": val_loss, "val_acc": val_acc, "val_exact": val_exact,
                        "seconds": time.perf_counter() - t})
        print(json.dumps(history[-1]))
        if best is None or val_loss < best[0]:  # the encoder written is the best epoch's (val loss)
            best = (val_loss, epoch + 1, {k: v.detach().clone() for k, v in net.state_dict().items()})
    net.load_state_dict(best[2])
    net.cpu()
    # A torchvision state dict: the classifier goes back to the network's own shape (unused:
    # the encoder drops it) so torchvision's constructor loads the file strictly.
    state = {k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}
    state.update({k: v for k, v in ENCODERS[args.encoder].builder(weights=None).state_dict().items()
                  if k.startswith("fc.")})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, out)
    if cells:  # what per-cell accuracy means here: the best constant guess (each value's share)
        targets = torch.stack([val[i][1] for i in range(len(val))])  # (images, cells, outputs)
        _, hit, counted = cell_loss(targets.mean((0, 1)).log().expand_as(targets), targets)
        baseline = {"val_acc_if_constant": float(hit[counted].float().mean())}
        shape = {"targets": "cells", "grid": f"{cells[1]}x{cells[1]}",
                 "outputs": {k: [*v, "nothing"] for k, v in CELL_GROUPS.items()}}
    else:  # what per-label accuracy means here: every label negative
        negatives = 1 - float(torch.stack([val[i][1] for i in range(len(val))]).mean()) if len(val) else None
        baseline = {"val_acc_if_all_negative": negatives}
        shape = {"targets": "image", "labels": len(LABELS)}
    summary = {"out": str(out), **shape, "train_images": len(train), "best_epoch": best[1], **baseline,
               "minutes": (time.perf_counter() - start) / 60, "history": history}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    print(f"{out}: {args.encoder} trained {args.epochs} epochs on {len(train)} images "
          f"({summary['minutes']:.1f} min), kept epoch {best[1]}: val accuracy "
          f"{history[best[1] - 1]['val_acc']:.3f}, images entirely right "
          f"{history[best[1] - 1]['val_exact']:.3f}")
    return summary


if __name__ == "__main__":
    main()
