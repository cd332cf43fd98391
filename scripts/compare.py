"""Run the controlled cross-modal comparison and write its report.

    python scripts/compare.py experiment=cross_modal_quick       # LSTM, 2 modes x 2 dims x 2 seeds
    python scripts/compare.py experiment=cross_modal             # the full grid (resumable)
    python scripts/compare.py experiment=cross_modal compare.seeds=[0,1,2,3] data=flickr8k
    python scripts/compare.py experiment=cross_modal compare.train=false   # report what is done
    python scripts/compare.py experiment=cross_modal compare.train=false compare.benchmark=false \
        compare.throughput_from=results/cross_modal/<timestamp>/report.json  # rebuild that report

Arguments are Hydra overrides of conf/train.yaml (the experiment preset sets `compare.*`:
attentions, dims, decoders, seeds, the step budget); `--help` shows the composed config. Each
cell trains once into results/<name>/cells/<config hash>/; re-running skips finished cells, so
an interrupted grid resumes. The report goes to results/<name>/<timestamp>/.
"""

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from captioning.compare.run import run_comparison
from captioning.compose_check import checked
from captioning.errors import report_user_errors
from captioning.schema import register

register()  # the config schemas the yamls name (captioning/schema/)


@checked("compare")  # an override Hydra cannot compose: one line, exit status 2
@hydra.main(version_base="1.3", config_path="../conf", config_name="compare")
@report_user_errors  # a bad key or path: one message, exit status 2
def main(cfg: DictConfig) -> None:
    """Every cell is conf/train.yaml + the same command-line overrides + the cell's own."""
    overrides = list(HydraConfig.get().overrides.task)
    run_comparison(cfg, overrides, lambda extra: hydra.compose("train", overrides=extra))


if __name__ == "__main__":
    main()
