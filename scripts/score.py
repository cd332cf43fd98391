"""Score any predictions file (COCO results format: [{"image_id", "caption"}]) against references
given as a Karpathy-split JSON or a COCO captions annotation file.

    python scripts/score.py predictions.json data/coco/dataset_coco.json --split test
    python scripts/score.py predictions.json captions_val2014.json --tokenizer ptb
    python scripts/score.py predictions.json dataset.json --split test --per-image scores.json
"""

from __future__ import annotations

import argparse
import json

from captioning.data.references import load_references
from captioning.errors import ArgumentParser, UserError, report_user_errors
from captioning.metrics.coco import coco_per_image
from captioning.metrics.scoring import format_table, score_captions


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("predictions", help="COCO results format JSON")
    p.add_argument("references", help="Karpathy-split JSON or COCO captions annotations")
    p.add_argument("--split", default=None, help="Karpathy split to read references from (all if unset)")
    p.add_argument("--tokenizer", choices=["simple", "ptb"], default="simple",
                   help="coco-caption tokenisation (ptb needs Java)")
    p.add_argument("--no-meteor", action="store_true", help="skip METEOR (Java)")
    p.add_argument("--json", default=None, help="write the metrics here too")
    p.add_argument("--per-image", default=None,
                   help="write {image_id: {bleu4, cider}} here: coco-caption's per-image scores")
    args = p.parse_args(argv)
    try:
        with open(args.predictions) as f:
            preds = json.load(f)
    except json.JSONDecodeError as err:
        raise UserError(f"{args.predictions} is not JSON ({err}); expected the COCO results format") from None
    if not isinstance(preds, list) or not all(isinstance(x, dict) and {"image_id", "caption"} <= set(x)
                                              for x in preds):
        raise UserError(f"{args.predictions}: expected a list of {{'image_id', 'caption'}} objects")
    texts, tokens = load_references(args.references, args.split)
    hyps = {x["image_id"]: x["caption"] for x in preds}
    if len(hyps) != len(preds):
        raise UserError(f"{args.predictions}: {len(preds) - len(hyps)} duplicate image_id entries")
    metrics, tokenization = score_captions(hyps, texts, tokens, "", args.tokenizer, not args.no_meteor)
    print(format_table(metrics, tokenization, prefix=""))
    print(f"{len(hyps)} images scored against {args.references}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(metrics, f, indent=2)
    if args.per_image:
        scores = coco_per_image(hyps, {i: texts[i] for i in hyps}, args.tokenizer)
        with open(args.per_image, "w") as f:
            json.dump({str(i): s for i, s in scores.items()}, f, indent=1)
    return metrics


if __name__ == "__main__":
    main()
