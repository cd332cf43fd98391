"""Train a captioner: `python train.py attention=additive decoder=lstm seed=1`."""

import hydra
from omegaconf import DictConfig, OmegaConf

from captioning.errors import report_user_errors
from captioning.lit import train
from captioning.provenance import run_stamp

# The run dir's name; cached: resolved once per process.
OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
@report_user_errors  # a bad config or file: one message, exit status 2, no traceback
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns test BLEU-4 so sweepers can optimise it."""
    return train(cfg).get("test/bleu4", 0.0)


if __name__ == "__main__":
    main()
