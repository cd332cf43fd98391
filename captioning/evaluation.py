"""Decode a split with a checkpoint and score it (used by scripts/evaluate.py)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .data.datasets import record_images
from .data.prepare import load_dataset_records, usable_data
from .errors import UserError
from .metrics.scoring import score_captions
from .predict import Caption, Predictor


def evaluate_checkpoint(
    checkpoint: str | Path | list,
    split: str = "test",
    decode: dict | None = None,
    data_overrides: dict | None = None,
    tokenizer: str = "simple",
    meteor: bool = True,
    batch_size: int | None = None,
    device: str = "auto",
) -> tuple[dict, list[dict], dict]:
    """-> (flat metrics in the results.json schema, COCO-format predictions (with decode.n_best
    > 1 each also has its n-best list, "nbest"), tokenisation used).

    `decode` entries that are not None override the checkpoint's decoding settings; the data
    config is the checkpoint's with `data_overrides` applied (e.g. another root or cache dir).
    Decoding runs on `device` (auto: the GPU when there is one).
    """
    predictor, records, captions, seconds = decode_split(checkpoint, split, decode, data_overrides,
                                                        batch_size, device)
    hyps = [c.words for c in captions]
    predictions = [{"image_id": r.image_id, "caption": " ".join(h)} for r, h in zip(records, hyps)]
    if predictor.decode["n_best"] > 1:  # beam search's n best, best first, with scores
        for p, c in zip(predictions, captions):
            p["nbest"] = c.nbest
    prefix = f"{split}/"
    metrics, tokenization = score_captions(
        {p["image_id"]: p["caption"] for p in predictions},
        {r.image_id: r.texts for r in records}, {r.image_id: r.captions for r in records},
        prefix, tokenizer, meteor, {r.image_id: r.objects for r in records},
    )
    metrics.update(
        {
            "images_per_s": len(records) / seconds,
            "num_images": len(records),
            "checkpoint": [str(c) for c in checkpoint] if isinstance(checkpoint, list) else str(checkpoint),
            "device": str(predictor.device),
            **{f"decode/{k}": v for k, v in predictor.decode.items()},
        }
    )
    return metrics, predictions, tokenization


def _check_unseen(records: list, train_cfg: dict, split: str) -> None:
    """Another dataset config than the checkpoint's: refuse to score images it trained on."""
    seen = {str(r.path.resolve()) for r in load_dataset_records(train_cfg)[0] if r.split == "train"}
    both = sorted(p for p in {str(r.path.resolve()) for r in records} if p in seen)
    if both:
        raise UserError(
            f"{len(both)} image(s) of split '{split}' are training images of this checkpoint "
            f"(e.g. {', '.join(both[:3])}): their scores would be too high. Evaluate on the "
            "checkpoint's own split (no +data overrides) or give a data config whose split holds "
            "no image it trained on")


def decode_split(
    checkpoint: str | Path | list,
    split: str = "test",
    decode: dict | None = None,
    data_overrides: dict | None = None,
    batch_size: int | None = None,
    device: str = "auto",
) -> tuple[Predictor, list, list[Caption], float]:
    """-> (the loaded predictor, the split's records, one Caption (words + attention) per record,
    seconds spent decoding). batch_size None: the run's data.eval_batch_size, so that the
    batches are its test stage's (on the run's machine and precision: its own captions)."""
    predictor = Predictor.load(checkpoint, decode, device)
    cfg = predictor.cfg
    batch_size = batch_size or cfg["data"]["eval_batch_size"]
    data_cfg = {**cfg["data"], **(data_overrides or {})}
    # Raw features as cached; the checkpoint's own normaliser is inside the model. A fine-tuned
    # encoder's features are not in any store: its images are read and encoded here.
    data = usable_data(data_cfg, cfg["encoder"])
    indices = data.split_indices(split)
    if not indices:
        raise UserError(f"split '{split}' has no images in {data_cfg.get('json_path') or data_cfg['root']}")
    if data_overrides and split != "train":
        _check_unseen([data.records[i] for i in indices], cfg["data"], split)
    files = None if predictor.model.encoder is None else record_images(
        data, cfg["encoder"]["image_size"], data_cfg["max_image_pixels"])
    captions, start = [], time.perf_counter()
    for i in range(0, len(indices), batch_size):
        chunk = indices[i : i + batch_size]
        regions = {}
        if files is None:
            batch = data.batch_features(chunk)  # (B, N, C) [+ mask, boxes: region features]
            raw, regions = batch.pop("features"), batch
        else:
            read = [files[k] for k in chunk]
            bad = [f"{data.records[k].path}: {why}" for k, (_, why) in zip(chunk, read) if why]
            if bad:  # readable when the store was built: a file changed since
                raise UserError(f"cannot read {len(bad)} image(s) of split '{split}': {bad[:5]}")
            with torch.no_grad():
                raw = predictor.model.encode(torch.stack([image for image, _ in read]).to(predictor.device))
        captions += predictor(raw, regions)
    return predictor, [data.records[i] for i in indices], captions, time.perf_counter() - start
