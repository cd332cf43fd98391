"""Decode a split with a checkpoint and score it (used by scripts/evaluate.py)."""

from __future__ import annotations

import time
from pathlib import Path

from .checkpoint import load_checkpoint
from .data.prepare import prepare_data
from .metrics import attribute_accuracy
from .metrics.report import score_captions
from .models.decoding import decode_batch, decode_settings


def evaluate_checkpoint(
    checkpoint: str | Path,
    split: str = "test",
    decode: dict | None = None,
    data_overrides: dict | None = None,
    tokenizer: str = "simple",
    meteor: bool = True,
    batch_size: int = 100,
) -> tuple[dict, list[dict], dict]:
    """-> (flat metrics in the results.json schema, COCO-format predictions, tokenisation used).

    `decode` entries that are not None override the checkpoint's decoding settings; the data
    config is the checkpoint's with `data_overrides` applied (e.g. another root or cache dir).
    """
    model, vocab, cfg = load_checkpoint(checkpoint)
    settings = decode_settings(cfg["decode"], decode)
    data_cfg = {**cfg["data"], **(data_overrides or {})}
    # The checkpoint's own normaliser and vocabulary: features are exactly what it trained on.
    data = prepare_data(data_cfg, cfg["encoder"], vocab, normalizer=model.normalizer)
    indices = data.split_indices(split)
    if not indices:
        raise ValueError(f"split '{split}' has no images in {data_cfg.get('json_path') or data_cfg['root']}")
    hyps, start = [], time.perf_counter()
    for i in range(0, len(indices), batch_size):
        feats = data.features[indices[i : i + batch_size]].float()
        ids, _ = decode_batch(model.decoder, feats, vocab.bos, vocab.eos, vocab.pad, settings)
        hyps += [vocab.decode(x) for x in ids]
    seconds = time.perf_counter() - start
    records = [data.records[i] for i in indices]
    predictions = [{"image_id": r.image_id, "caption": " ".join(h)} for r, h in zip(records, hyps)]
    refs = {r.image_id: [" ".join(c) for c in r.captions] for r in records}
    prefix = f"{split}/"
    metrics, tokenization = score_captions(
        {p["image_id"]: p["caption"] for p in predictions}, refs, prefix, tokenizer, meteor
    )
    metrics.update(attribute_accuracy(hyps, [r.objects for r in records], prefix))
    metrics.update(
        {
            "images_per_s": len(indices) / seconds,
            "num_images": len(indices),
            "checkpoint": str(checkpoint),
            **{f"decode/{k}": v for k, v in settings.items()},
        }
    )
    return metrics, predictions, tokenization


