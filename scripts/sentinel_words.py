"""Which words does adaptive attention's visual sentinel take? Decodes a split with a checkpoint
trained with attention=adaptive and prints the sentinel's mean weight per word class (visual:
colours, shapes, sizes, positions; function: articles, prepositions, ...; other) and per word.

    python scripts/sentinel_words.py outputs/train/runs/<run>/checkpoints/best.ckpt --split test
"""

from __future__ import annotations

import argparse
import json

from captioning.errors import ArgumentParser, UserError, report_user_errors
from captioning.evaluation import decode_split
from captioning.metrics.sentinel import sentinel_by_word
from captioning.models.attention import sentinel_weight


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--split", default="test")
    p.add_argument("--beam-size", type=int, default=None, help="default: the checkpoint's decode.beam_size")
    p.add_argument("--json", default=None, help="write the numbers here too")
    args = p.parse_args(argv)
    predictor, _, captions, _ = decode_split(args.checkpoint, args.split, {"beam_size": args.beam_size})
    if predictor.cfg["attention"]["name"] != "adaptive":
        name = predictor.cfg["attention"]["name"]
        raise UserError(f"{args.checkpoint} was trained with attention={name}: only "
                         "attention=adaptive has a visual sentinel")
    out = sentinel_by_word([(c.words, sentinel_weight(c.weights).tolist()) for c in captions])
    print("| word class | mean sentinel weight | words |\n|---|---:|---:|")
    for name in ("visual", "function", "other"):
        if name in out["classes"]:
            mean, n = out["classes"][name]
            print(f"| {name} | {mean:.3f} | {n} |")
    ranked = sorted(out["words"].items(), key=lambda kv: -kv[1][0])
    print("\nper word (>= 20 occurrences), highest first: " + ", ".join(
        f"{w} {m:.2f}" for w, (m, n) in ranked if n >= 20))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
