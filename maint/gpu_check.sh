#!/usr/bin/env bash
# The GPU check: one command on a fresh GPU machine (Python, PyTorch, pytorch-lightning; no
# internet). Installs what is missing from wheels/ (fill it here with `make wheels TARGET_PY=3.x
# TARGET_TORCH=2.y` and copy the repo), then, capped at ~6 minutes and writing as it goes:
#   1. the benchmark on the device (every attention mode, both decoders, decoding, encoder) in
#      bf16 and fp32;
#   2. a short `train.py trainer=gpu` on the built-in data for each decoder, whose test stage is
#      the beam evaluation (beam 5);
#   3. summary.json + summary.md in the output folder.
# usage: [PYTHON=python3] maint/gpu_check.sh [--device cuda|cpu] [--out DIR]
# (PYTHON: the interpreter that has PyTorch; --device cpu: tiny shapes, for CI)
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda
OUT=gpu_check
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--device cuda|cpu] [--out DIR]" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
WHEELS_DIR="${WHEELS_DIR:-wheels}"   # where make wheels put them
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
STATUS="$OUT/status.tsv"
: > "$STATUS"

# 1. versions first: what is there, what is missing, what wheels/ must provide.
MISSING=$("$PY" - "$DEVICE" <<'PYEOF'
import importlib, sys
try:
    import torch, pytorch_lightning
except ImportError as err:
    sys.exit(f"gpu_check: {err.name} is missing; this check needs PyTorch and pytorch-lightning installed")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("gpu_check: --device cuda but torch.cuda.is_available() is False (use --device cpu)")
need = {"hydra": "hydra_core", "omegaconf": "omegaconf", "antlr4": "antlr4_python3_runtime",
        "nltk": "nltk", "regex": "regex", "click": "click", "joblib": "joblib", "yaml": "pyyaml",
        "tqdm": "tqdm", "PIL": "pillow", "numpy": "numpy", "torchvision": "torchvision"}
missing = []
for module, wheel in need.items():
    try:
        mod = importlib.import_module(module)
    except ImportError:
        missing.append(wheel)
        continue
    if module == "torchvision":  # must match torch: 0.(N+15) for torch 2.N
        want = f"0.{int(torch.__version__.split('.')[1]) + 15}."
        if not mod.__version__.startswith(want):
            print(f"gpu_check: torchvision {mod.__version__} does not match torch {torch.__version__} "
                  f"(needs {want}x); installing it from wheels/", file=sys.stderr)
            missing.append(wheel)
print(f"gpu_check: python {sys.version.split()[0]}, torch {torch.__version__}, lightning "
      f"{pytorch_lightning.__version__}, missing: {', '.join(missing) or 'nothing'}", file=sys.stderr)
print(" ".join(missing))
PYEOF
) || exit 2   # no torch, or no GPU for --device cuda: the message above, one line
if [ -n "$MISSING" ]; then
  WHEELS=()
  for name in $MISSING; do
    found=$(ls "$WHEELS_DIR/$name"-*.whl "$WHEELS_DIR/${name,,}"-*.whl 2>/dev/null | head -1)
    if [ -z "$found" ]; then
      echo "gpu_check: no wheel for $name in wheels/; on a machine with internet run" \
           "make wheels TARGET_PY=<this python> TARGET_TORCH=<this torch> and copy wheels/ here" >&2
      exit 2
    fi
    WHEELS+=("$found")
  done
  "$PY" -m pip install -q --no-index --no-deps --no-cache-dir --target "$OUT/site" "${WHEELS[@]}" || exit 1
fi
export PYTHONPATH="$OUT/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled MPLCONFIGDIR="$OUT/mpl"

phase() {  # name, seconds, command...: run capped, log to $OUT/<name>.log, record the outcome
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >> "$STATUS"
  echo "gpu_check: $name: exit $rc in $((SECONDS - start)) s (log: $OUT/$name.log)" >&2
}

if [ "$DEVICE" = cuda ]; then
  BENCH=(--device cuda --repeats 3)
  TRAIN=(trainer=gpu data.synthetic.num_train=1200 data.synthetic.num_val=100
         data.synthetic.num_test=200 trainer.max_epochs=3)
  LIMITS=(75 75 90)
else  # tiny shapes: the same path in about a minute on a laptop CPU
  BENCH=(--device cpu --repeats 1 --warmup 0 --batch 4 --grid 2 --feature-dim 64 --d-model 32
         --vocab 100 --tokens 5 --beam-batch 4 --encoder resnet18 --image-size 64
         --encoder-images 8 --encoder-batch 4 --peak-size 64 --modes additive,dot --no-naive)
  TRAIN=(trainer=cpu encoder=resnet18 encoder.image_size=64 data.synthetic.num_train=48
         data.synthetic.num_val=8 data.synthetic.num_test=9 data.synthetic.image_size=64
         data.batch_size=8 trainer.max_epochs=1 attention.attn_dim=32)
  SMALL_lstm=(decoder.embed_dim=32 decoder.hidden_dim=32 decoder.value_dim=32)
  SMALL_transformer=(decoder.d_model=32 decoder.ff_dim=64 decoder.num_layers=1 decoder.num_heads=4)
  LIMITS=(60 60 90)
fi

# 2. benchmark, bf16 and fp32 (results written per phase: a phase cut by its limit loses itself only)
for precision in bf16 fp32; do
  phase "bench_$precision" "${LIMITS[0]}" "$PY" scripts/benchmark.py "${BENCH[@]}" --precision "$precision" \
    --json "$OUT/bench_$precision.json" --markdown "$OUT/bench_$precision.md"
done
# 3. short training runs, beam 5 in the test stage
for decoder in lstm transformer; do
  small="SMALL_$decoder[@]"
  phase "train_$decoder" "${LIMITS[2]}" "$PY" train.py decoder="$decoder" "${TRAIN[@]}" "${!small}" logger=csv \
    decode.beam_size=5 trainer.enable_progress_bar=false paths.data_dir="$OUT/data" \
    paths.log_dir="$OUT/runs" hydra.run.dir="$OUT/runs/$decoder"
done

# 4. summary
"$PY" - "$OUT" "$DEVICE" <<'PYEOF'
import json, platform, sys
from pathlib import Path
out, device = Path(sys.argv[1]), sys.argv[2]
import torch
status = [line.split("\t") for line in (out / "status.tsv").read_text().splitlines()]
summary = {"device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
           "torch": torch.__version__, "phases": {n: {"exit": int(rc), "seconds": int(s)} for n, rc, s in status},
           "train": {}}
keys = ["test/bleu4", "test/attn_entropy", "median_step_s", "first_step_s", "wall_time_s"]
for decoder in ("lstm", "transformer"):
    results = out / "runs" / decoder / "results.json"
    if results.is_file():
        r = json.loads(results.read_text())
        summary["train"][decoder] = {k: r.get(k) for k in keys}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
lines = [f"# GPU check: {summary['device']}, torch {summary['torch']}", "",
         "| phase | exit | seconds |", "|---|---:|---:|"]
lines += [f"| {n} | {p['exit']} | {p['seconds']} |" for n, p in summary["phases"].items()]
lines += ["", "| decoder | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
lines += [f"| {d} | " + " | ".join(str(v) for v in r.values()) + " |" for d, r in summary["train"].items()]
for precision in ("bf16", "fp32"):
    md = out / f"bench_{precision}.md"
    if md.is_file():
        lines += ["", f"## Benchmark, {precision}", "", md.read_text()]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines[:8 + len(summary["phases"]) + len(summary["train"])]))
failed = [n for n, p in summary["phases"].items() if p["exit"] != 0]
sys.exit(f"gpu_check: failed: {', '.join(failed)}" if failed else 0)
PYEOF
