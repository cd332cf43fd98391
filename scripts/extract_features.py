"""Extract a dataset's image features once and write them as files encoder=precomputed reads.

    python scripts/extract_features.py encoder=vit_b_16 extract.out=features/vit_b_16
    python scripts/extract_features.py data=coco encoder=resnet50 encoder.pretrained=true \
        extract.out=features/coco_r50.npz extract.format=npz
    python train.py encoder=precomputed encoder.path=features/vit_b_16 encoder.grid=true ...

Takes the training config (the same `data=` / `encoder=` overrides as train.py; a debug preset's
small dataset extracts only its images). The features go through the encoder's feature store
(progress with rate and ETA, an interrupted extraction resumes, unreadable images skipped and
named), then into `extract.format` (npy_dir | npz_dir | npz) under `extract.out`, bit for bit
the rows training on the encoder reads; `extract.json` beside them says what made them.
"""

import hydra
from omegaconf import DictConfig, OmegaConf

from captioning.compose_check import checked
from captioning.data.export import export_features
from captioning.errors import report_user_errors
from captioning.schema import register

register()  # the config schemas the yamls name (captioning/schema/)


@checked("extract_features")  # an override Hydra cannot compose: one line, exit status 2
@hydra.main(version_base="1.3", config_path="../conf", config_name="extract_features")
@report_user_errors  # missing weights, a missing dataset file: one line on stderr, exit status 2
def main(cfg: DictConfig) -> None:
    plain = OmegaConf.to_container(cfg, resolve=True)
    done = export_features(plain["data"], plain["encoder"], plain["extract"])
    print(f"{done['images']} images, {done['cells']} x {done['dim']} features each "
          f"({done['format']}) -> {done['path']}")
    print(f"train on them: python train.py {done['train_with']}")


if __name__ == "__main__":
    main()
