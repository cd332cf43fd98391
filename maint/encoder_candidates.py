"""Which learned encoder leaves attention a job? For each candidate, one additive run at seed 0
on its features, and the two numbers that say whether the decoder has to look: grounding
(attention mass on the named object against uniform attention's) and attribute accuracy (how
far below its ceiling of 1). An encoder whose every cell carries the whole image's answer gives
grounding ~1x and accuracy ~1: any cell will do, and a grid of attention modes on it would
measure something other than attention.

Candidates: `random` (the random-init ResNet-50 of the first studies), `image` and `cells`
(scripts/pretrain_encoder.py --targets image|cells: a ResNet-50 trained on the built-in images'
attributes, or on what lies under each cell of its grid). A candidate's weights file is made
first where it is absent.

    python maint/encoder_candidates.py --out results/encoder_candidates/cpu.json
    python maint/encoder_candidates.py --candidates cells --out ... trainer=gpu   # + train.py overrides

Writes {candidate: {encoder file sha256, the run's test metrics, its command}} as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from captioning.errors import ArgumentParser

ROOT = Path(__file__).resolve().parents[1]
METRICS = ["test/bleu4", "test/cider", "test/attr_acc", "test/grounding_ratio", "test/attn_entropy",
           "best_epoch", "epochs_trained", "wall_time_s", "machine", "accelerator", "encoder_sha256"]


def main() -> None:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the JSON to write")
    p.add_argument("--candidates", default="random,image,cells")
    p.add_argument("--encoders", default="data/encoders", help="where the weights files are")
    p.add_argument("--pretrain-epochs", type=int, default=6)
    p.add_argument("--epochs", type=int, default=15, help="the check run's trainer.max_epochs")
    p.add_argument("--runs", default="outputs/encoder_candidates")
    p.add_argument("--device", default="auto", help="where the candidates' encoders train")
    p.add_argument("overrides", nargs="*", help="train.py overrides for every check run (e.g. trainer=gpu)")
    args = p.parse_args()
    results = {}
    for name in args.candidates.split(","):
        train = [sys.executable, "train.py", "attention=additive", "seed=0",
                 f"trainer.max_epochs={args.epochs}", "logger=csv", "trainer.enable_progress_bar=false",
                 f"hydra.run.dir={args.runs}/{name}", *args.overrides]
        if name != "random":
            arch = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("encoder=")), "resnet50")
            weights = Path(args.encoders) / f"{arch}_builtin_{'attr' if name == 'image' else name}.pth"
            if not weights.is_file():
                data = [o for o in args.overrides if o.startswith(("data.", "encoder.image_size", "paths."))]
                subprocess.run([sys.executable, "scripts/pretrain_encoder.py", "--targets", name,
                                "--epochs", str(args.pretrain_epochs), "--device", args.device,
                                "--encoder", arch,
                                "--out", str(weights), *data], check=True, cwd=ROOT)
            train += ["encoder.pretrained=true", f"encoder.weights_path={weights}",
                      "encoder.verify_weights=false"]
        start = time.time()
        subprocess.run(train, check=True, cwd=ROOT)
        r = json.loads((ROOT / args.runs / name / "results.json").read_text())
        results[name] = {**{k: r.get(k) for k in METRICS}, "minutes": round((time.time() - start) / 60, 1),
                         "command": " ".join(["python", *train[1:]])}
        print(json.dumps({name: results[name]}), flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
