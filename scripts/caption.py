"""Caption image files with a checkpoint and save attention maps (one panel per word).

    python scripts/caption.py checkpoint=outputs/train/runs/<run>/checkpoints/best.ckpt \\
        image=data/synthetic/synthetic_<hash>/images/000123.png attention_map=attention.png
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from captioning.caption_files import caption_images
from captioning.compose_check import checked
from captioning.errors import UserError, report_user_errors
from captioning.schema import register

register()  # the config schemas the yamls name (captioning/schema/)


@checked("caption")  # an override Hydra cannot compose: one line, exit status 2
@hydra.main(version_base="1.3", config_path="../conf", config_name="caption")
@report_user_errors  # a bad checkpoint or path: one message, exit status 2
def main(cfg: DictConfig) -> None:
    """Caption every readable image; files that are not images are skipped with a message."""
    results, skipped = caption_images(
        cfg.checkpoint, cfg.image, OmegaConf.to_container(cfg.decode), cfg.attention_map,
        scale=cfg.attention_scale, device=cfg.device,
    )
    for r in results:
        extra = f"  -> {r['figure']}" if r.get("figure") else ""
        print(f"{r['image']}: {r['caption']}{extra}")
        for rank, h in enumerate(r.get("nbest") or [], 1):  # decode.n_best > 1
            print(f"  {rank}. {h['caption']}  (score {h['score']:.3f}, log-prob {h['logprob']:.3f})")
    for path, why in skipped:
        print(f"skipped {path}: {why}")
    if not results:
        raise UserError(f"no readable image under {Path(cfg.image)}")


if __name__ == "__main__":
    main()
