"""Evaluate a checkpoint on a split: predictions.json + metrics.json + a table of nltk and
coco-caption scores side by side.

    python scripts/evaluate.py checkpoint=outputs/train/runs/<run>/checkpoints/best.ckpt \\
        split=test decode.beam_size=5 decode.alpha=0.5 device=auto
    python scripts/evaluate.py 'checkpoint=[<run1>/checkpoints/best.ckpt,<run2>/checkpoints/best.ckpt]'
        (an ensemble: per-step log-probabilities averaged, in greedy, beam and sampling)
"""

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from captioning.compose_check import checked
from captioning.errors import report_user_errors
from captioning.evaluation import evaluate_checkpoint
from captioning.metrics.scoring import format_table
from captioning.schema import register

log = logging.getLogger("evaluate")


register()  # the config schemas the yamls name (captioning/schema/)


@checked("evaluate")  # an override Hydra cannot compose: one line, exit status 2
@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
@report_user_errors  # a bad checkpoint or path: one message, exit status 2
def main(cfg: DictConfig) -> None:
    """Decode, score, write, print."""
    # one checkpoint, or a list of them: an ensemble (checkpoint='[a.ckpt,b.ckpt]')
    listed = OmegaConf.is_list(cfg.checkpoint)
    checkpoints = OmegaConf.to_container(cfg.checkpoint) if listed else [cfg.checkpoint]
    metrics, predictions, tokenization = evaluate_checkpoint(
        checkpoints if len(checkpoints) > 1 else checkpoints[0], cfg.split,
        OmegaConf.to_container(cfg.decode),
        OmegaConf.to_container(cfg.data), cfg.tokenizer, cfg.meteor, cfg.batch_size, cfg.device,
    )
    beam, alpha = metrics["decode/beam_size"], metrics["decode/alpha"]
    ensemble = f"_ensemble{len(checkpoints)}" if len(checkpoints) > 1 else ""
    default = Path(checkpoints[0]).parent.parent / "eval" / f"{cfg.split}_beam{beam}_alpha{alpha}{ensemble}"
    out = Path(cfg.output_dir or default)
    out.mkdir(parents=True, exist_ok=True)
    nbest = [{"image_id": p["image_id"], "nbest": p.pop("nbest")} for p in predictions if "nbest" in p]
    (out / "predictions.json").write_text(json.dumps(predictions, indent=1))
    if nbest:  # decode.n_best > 1: every image's n best, best first (caption, score, logprob)
        (out / "predictions_nbest.json").write_text(json.dumps(nbest, indent=1))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(format_table(metrics, tokenization, prefix=f"{cfg.split}/"))
    extra = {k: v for k, v in metrics.items() if "attr_acc" in k}
    if extra:
        print("attribute accuracy: " + ", ".join(f"{k.split('/')[-1]} {v:.3f}" for k, v in extra.items()))
    print(f"decoding on {metrics['device']}: beam {beam}, alpha {alpha}, "
          f"{metrics['images_per_s']:.1f} images/s ({metrics['num_images']} images); written to {out}")


if __name__ == "__main__":
    main()
