"""Several runs side by side on the test images: captions, per-image BLEU-4 and CIDEr-D,
attribute errors, and each word's attention, as one folder that opens from disk.

    python scripts/gallery.py 'runs=[outputs/train/runs/<a>,outputs/train/runs/<b>]' names=[additive,dot]

Open <out>/index.html in a browser (no server, no network). Sort by the score difference of two
runs, filter by attribute errors, open an image's attention view.
"""

import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from captioning.compose_check import checked
from captioning.errors import UserError, report_user_errors
from captioning.gallery import build_gallery
from captioning.schema import register

log = logging.getLogger("gallery")


register()  # the config schemas the yamls name (captioning/schema/)


@checked("gallery")  # an override Hydra cannot compose: one line, exit status 2
@hydra.main(version_base="1.3", config_path="../conf", config_name="gallery")
@report_user_errors  # a missing run dir or file: one line on stderr, exit status 2
def main(cfg: DictConfig) -> None:
    runs = OmegaConf.to_container(cfg.runs) if OmegaConf.is_list(cfg.runs) else [cfg.runs]
    names = OmegaConf.to_container(cfg.names) if cfg.names else None
    checkpoints = OmegaConf.to_container(cfg.checkpoints) if cfg.checkpoints else None
    if checkpoints is not None and len(checkpoints) != len(runs):
        raise UserError(f"checkpoints= has {len(checkpoints)} entries for {len(runs)} runs (null: its own)")
    build_gallery(runs, cfg.out, names, cfg.split, cfg.device, cfg.page_size, checkpoints)  # logs where


if __name__ == "__main__":
    main()
