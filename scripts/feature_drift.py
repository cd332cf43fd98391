"""How far a fine-tuned encoder's features moved from the ones its normaliser was fitted on.

    python scripts/feature_drift.py outputs/train/runs/<run>/checkpoints/best.ckpt --images 512

The normaliser of a fine-tuned model stays as fitted on the frozen encoder's features (README
"Fine-tuning the encoder"). This measures whether that still holds: on training images (no
augmentation), the normalised features of the frozen and of the tuned encoder, side by side:
their mean size per dimension (0 when centred), mean variance per dimension (1 when whitened or
standardised), and the relative change of the raw features.
"""


import torch

from captioning import load_checkpoint
from captioning.data.datasets import record_images
from captioning.data.prepare import load_features
from captioning.errors import ArgumentParser, UserError, report_user_errors
from captioning.models.encoder import build_tunable_encoder


def stats(features: torch.Tensor) -> tuple[float, float]:
    """(mean |per-dimension mean|, mean per-dimension variance) of (M, D) rows."""
    return features.mean(0).abs().mean().item(), features.var(0).mean().item()


@torch.no_grad()
@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--images", type=int, default=512, help="training images to encode")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    model, _, cfg = load_checkpoint(args.checkpoint)
    if model.encoder is None:
        raise UserError(f"{args.checkpoint} has no fine-tuned encoder (encoder.finetune=false)")
    frozen = build_tunable_encoder(cfg["encoder"]).eval()  # the same network, untrained stages
    data = load_features(cfg["data"], cfg["encoder"])
    files = record_images(data, cfg["encoder"]["image_size"])
    train = data.split_indices("train")[: args.images]
    raw = {"frozen": [], "tuned": []}
    for start in range(0, len(train), args.batch):
        images = torch.stack([files[i][0] for i in train[start : start + args.batch]])
        raw["frozen"].append(frozen(images))
        raw["tuned"].append(model.encode(images))
    rows = {k: torch.cat(v).flatten(0, 1) for k, v in raw.items()}  # (images x cells, C)
    change = ((rows["tuned"] - rows["frozen"]).norm() / rows["frozen"].norm()).item()
    print(f"{len(train)} training images x {raw['frozen'][0].shape[1]} cells; "
          f"relative change of the raw features: {change:.3f}")
    print("normalised features  | mean |mu| per dim | mean variance per dim")
    for name, r in rows.items():
        mu, var = stats(model.normalizer(r))
        print(f"{name:<20} | {mu:17.3f} | {var:21.3f}")


if __name__ == "__main__":
    main()
