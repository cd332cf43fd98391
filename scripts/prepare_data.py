"""Check a dataset and build its feature store before training on it.

    python scripts/prepare_data.py data=flickr8k
    python scripts/prepare_data.py data=coco data.format=coco data.json_path=... data.split_file=...

Takes the training config (the same `data=` / `encoder=` overrides as train.py). Prints a
summary (images per split, captions, caption lengths, vocabulary, missing / escaping / duplicate /
unreadable files, the store's size, estimated training RAM) and writes it whole to
`report=data_report.json`. Building the store is the slow part; it logs progress with rate and
ETA, and an interrupted build resumes where it stopped.
"""

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from captioning.compose_check import checked
from captioning.data.dataset_report import data_report, summary
from captioning.errors import report_user_errors
from captioning.schema import register

log = logging.getLogger("prepare_data")


register()  # the config schemas the yamls name (captioning/schema/)


@checked("prepare_data")  # an override Hydra cannot compose: one line, exit status 2
@hydra.main(version_base="1.3", config_path="../conf", config_name="prepare_data")
@report_user_errors  # missing weights, a missing dataset file: one line on stderr, exit status 2
def main(cfg: DictConfig) -> None:
    plain = OmegaConf.to_container(cfg, resolve=True)
    report = data_report(plain["data"], plain["encoder"])
    Path(cfg.report).write_text(json.dumps(report, indent=1))
    print(summary(report))
    print(f"full report: {cfg.report}")


if __name__ == "__main__":
    main()
