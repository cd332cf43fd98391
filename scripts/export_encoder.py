"""Write the encoder of a fine-tuned checkpoint (encoder.finetune=true) as a torchvision weights
file, so it can be used frozen like any other weights: the feature store caches its features
under the file's content hash. The comparison's "trained encoder" condition (docs/comparison.md)
is made this way.

    python scripts/export_encoder.py <run>/checkpoints/best.ckpt data/encoders/resnet50_builtin.pth
    python train.py encoder.pretrained=true encoder.weights_path=data/encoders/resnet50_builtin.pth \\
        encoder.verify_weights=false
"""

from pathlib import Path

import torch

from captioning import load_checkpoint
from captioning.errors import ArgumentParser, UserError, report_user_errors
from captioning.models.encoder import torchvision_state


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> Path:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("output", help="the .pth file to write")
    args = parser.parse_args(argv)
    model, _, cfg = load_checkpoint(args.checkpoint)
    if model.encoder is None:
        raise UserError(f"{args.checkpoint} has no trained encoder (encoder.finetune=false): "
                         "its encoder is the configured one, nothing to export")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torchvision_state(model.encoder, cfg["encoder"]["name"]), out)
    print(f"{out}: {cfg['encoder']['name']} with stages trained by {args.checkpoint} "
          f"(encoder.finetune_stages={cfg['encoder'].get('finetune_stages')})")
    return out


if __name__ == "__main__":
    main()
