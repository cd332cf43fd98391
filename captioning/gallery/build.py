"""Collect what the gallery shows: per run its test captions (predictions.json), per-image
scores, attribute errors, and the attention behind each word (re-decoded from the run's
checkpoint); per image its file and references; the summary (corpus scores with CIs, the
configs that differ). Writes the folder through captioning.gallery.page."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from ..data.vocab import tokenize
from ..errors import UserError
from ..evaluation import decode_split
from ..metrics.attributes import attribute_errors
from ..metrics.coco import coco_per_image
from ..metrics.stats import (
    bleu_from_stats,
    bleu_stats,
    bootstrap_bleu,
    bootstrap_indices,
    count_references,
    percentile_interval,
)
from ..provenance import flatten, hashed_view
from .page import write_page

log = logging.getLogger(__name__)

MAX_SIDE = 320  # images are copied at most this many pixels a side (the page shows ~200)


@dataclass
class Run:
    """One run as the gallery shows it."""

    name: str
    folder: Path
    captions: dict  # image_id -> the run's caption (predictions.json)
    config: dict  # flat hashed config (what identifies the run)
    attention: dict = field(default_factory=dict)  # image_id -> (words, weights (L, N) float32)
    redecoded_differs: int = 0  # images whose re-decoded caption is not predictions.json's
    note: str = ""  # why there is no attention, if there is none


def _checkpoint(folder: Path) -> Path | None:
    for name in ("best.ckpt", "last.ckpt"):
        if (path := folder / "checkpoints" / name).is_file():
            return path
    return None


def _config(folder: Path, ckpt: Path | None) -> dict:
    """The run's hashed config, flat: cell.json (committed comparison cells), else the
    checkpoint's, else .hydra/config.yaml."""
    if (folder / "cell.json").is_file():
        return flatten(json.loads((folder / "cell.json").read_text()))
    if ckpt is not None:
        from ..checkpoint import checkpoint_config, read_checkpoint

        return flatten(hashed_view(checkpoint_config(read_checkpoint(ckpt), ckpt)[0]))
    if (folder / ".hydra" / "config.yaml").is_file():
        from omegaconf import OmegaConf

        return flatten(hashed_view(OmegaConf.to_container(OmegaConf.load(folder / ".hydra" / "config.yaml"))))
    return {}


def load_run(folder: str | Path, name: str, split: str, device: str, batch_size: int | None = None,
             checkpoint: str | Path | None = None):
    """-> (Run, the split's records as the checkpoint reads them, or None without a checkpoint).
    `checkpoint`: where the attention comes from when the folder has none (a comparison cell
    trained again elsewhere); the folder's predictions.json stays what is shown and scored."""
    folder = Path(folder)
    preds_path = folder / "predictions.json"
    if not preds_path.is_file():
        raise UserError(f"{folder}: no predictions.json (a finished run dir, or a comparison cell, "
                        "holds one)")
    captions = {p["image_id"]: p["caption"] for p in json.loads(preds_path.read_text())}
    ckpt = Path(checkpoint) if checkpoint else _checkpoint(folder)
    run = Run(name, folder, captions, _config(folder, ckpt))
    if ckpt is None:
        run.note = f"no checkpoint in {folder / 'checkpoints'}: captions and scores only"
        return run, None
    _, records, decoded, _ = decode_split(ckpt, split, None, None, batch_size, device)
    for record, caption in zip(records, decoded):
        weights = caption.weights.float().numpy()
        run.attention[record.image_id] = (caption.words, weights)
        if " ".join(caption.words) != captions.get(record.image_id):
            run.redecoded_differs += 1
    return run, records


def _copy_image(src: Path, out: Path, k: int) -> str:
    """The image as the page shows it: images/<k>.jpg, at most MAX_SIDE a side. JPEG at quality
    90 without chroma subsampling: colours as they are (the built-in images' noisy textures are
    ~32 KB each as PNG, ~10 KB so)."""
    name = f"images/{k}.jpg"
    with Image.open(src) as im:
        im = im.convert("RGB")
        im.thumbnail((MAX_SIDE, MAX_SIDE))
        im.save(out / name, quality=90, subsampling=0)
    return name


def _corpus(runs: list[Run], ids: list, refs_tokens: dict, per_image: dict,
            samples: int = 1000) -> list[dict]:
    """Per run: corpus BLEU-4 (nltk, the training metric) and mean CIDEr-D with 95% bootstrap
    intervals over the images (one draw for all runs); and run k - run 0 the same way."""
    draw = bootstrap_indices(len(ids), samples, seed=0)  # the images bootstrap_bleu resamples
    out = []
    counted = count_references({i: refs_tokens[i] for i in ids})  # once for all runs
    stats = [np.stack([bleu_stats(tokenize(r.captions[i]), counted[i]) for i in ids]) for r in runs]
    cider = [np.array([per_image[r.name][i]["cider"] for i in ids]) for r in runs]
    bleu_draws = [bootstrap_bleu([s], samples, seed=0) for s in stats]
    for k, r in enumerate(runs):
        row = {"run": r.name, "bleu4": float(bleu_from_stats(stats[k].sum(0))),
               "bleu4_ci": percentile_interval(bleu_draws[k]),
               "cider": float(cider[k].mean()), "cider_ci": percentile_interval(cider[k][draw].mean(1))}
        if k:
            row["bleu4_minus_first_ci"] = percentile_interval(bleu_draws[k] - bleu_draws[0])
            row["cider_minus_first_ci"] = percentile_interval((cider[k] - cider[0])[draw].mean(1))
        out.append(row)
    return out


def differing_config(runs: list[Run]) -> dict[str, list]:
    """{dotted key: [value per run]} for the keys whose values differ between the runs."""
    keys = sorted(set().union(*(r.config for r in runs)))
    return {k: [r.config.get(k) for r in runs] for k in keys
            if len({json.dumps(r.config.get(k), sort_keys=True, default=str) for r in runs}) > 1}


def build_gallery(folders: list[str | Path], out: str | Path, names: list[str] | None = None,
                  split: str = "test", device: str = "auto", page_size: int = 50,
                  checkpoints: list[str | Path | None] | None = None) -> dict:
    """Write a self-contained gallery of `folders` (run dirs or comparison cells) into `out`:
    index.html, gallery.js/css, data.js (attention weights), images/. -> summary (sizes, time).
    `checkpoints`: per folder, a checkpoint to take the attention from instead of its own."""
    start = time.perf_counter()
    if len(folders) < 1:
        raise UserError("runs=[...] is empty: give one or more run dirs")
    names = list(names) if names else [Path(f).name for f in folders]
    if len(names) != len(folders) or len(set(names)) != len(names):
        raise UserError(f"names={names}: one distinct name per run ({len(folders)} runs)")
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    checkpoints = list(checkpoints) if checkpoints else [None] * len(folders)
    loaded = [load_run(f, n, split, device, checkpoint=c) for f, n, c in zip(folders, names, checkpoints)]
    runs = [run for run, _ in loaded]
    records = next((recs for _, recs in loaded if recs is not None), None)
    if records is None:
        raise UserError("none of the runs has a checkpoint, so the images and references cannot "
                        "be found; give at least one run dir with checkpoints/best.ckpt")
    ids = [r.image_id for r in records]
    for run in runs:
        missing = [i for i in ids if i not in run.captions]
        if missing or len(run.captions) != len(ids):
            raise UserError(f"{run.folder}: its predictions.json does not caption the {len(ids)} "
                            f"{split} images of the others (e.g. missing {missing[:3]}): runs of "
                            "one dataset and split only")
    refs_text = {r.image_id: r.texts or [" ".join(c) for c in r.captions] for r in records}
    refs_tokens = {r.image_id: r.captions for r in records}
    per_image = {run.name: coco_per_image({i: run.captions[i] for i in ids}, refs_text) for run in runs}
    entries = []
    for k, rec in enumerate(records):
        image = _copy_image(rec.path, out, k)
        single = rec.objects[0] if len(rec.objects) == 1 else None
        row = {"k": k, "image_id": rec.image_id, "image": image, "refs": refs_text[rec.image_id],
               "file": str(rec.path.name), "runs": []}
        for run in runs:
            words = run.captions[rec.image_id].split()
            errors = attribute_errors(words, single) if single else None
            att = run.attention.get(rec.image_id)
            row["runs"].append({
                "caption": run.captions[rec.image_id], "words": words,
                "bleu4": per_image[run.name][rec.image_id]["bleu4"],
                "cider": per_image[run.name][rec.image_id]["cider"], "errors": errors,
                "attention_words": att[0] if att else None,
                # 4 decimals, from float64: float32 values would print 17 digits each
                "weights": np.round(att[1].astype(np.float64), 4).tolist() if att else None})
        entries.append(row)
    summary = {"runs": [{"name": r.name, "folder": str(r.folder), "note": r.note,
                         "redecoded_differs": r.redecoded_differs} for r in runs],
               "split": split, "images": len(entries), "corpus": _corpus(runs, ids, refs_tokens, per_image),
               "differs": differing_config(runs)}
    write_page(out, summary, entries, page_size)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    summary["bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log.info("gallery: %d images x %d runs -> %s (%.1f MB, %.0f s)", len(entries), len(runs),
             out / "index.html", summary["bytes"] / 1e6, summary["seconds"])
    return summary
