"""Train a captioner: `python train.py attention=additive decoder=lstm seed=1`."""

import hydra
from omegaconf import DictConfig

from captioning.errors import report_user_errors
from captioning.lit import train


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
@report_user_errors  # a bad config or file: one message, exit status 2, no traceback
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns test BLEU-4 so sweepers can optimise it."""
    return train(cfg).get("test/bleu4", 0.0)


if __name__ == "__main__":
    main()
