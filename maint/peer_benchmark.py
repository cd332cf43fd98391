"""Time the strongest peer codebase, ruotianluo/ImageCaptioning.pytorch, at scripts/benchmark.py's
shapes: its own UpDown model, loss, optimiser and greedy decoding, run unchanged from a clone of
it (its code is never copied into this repository). Prints one JSON object (--json: also a
file), the format docs/figures.json's peer pairs are read in.

    git clone https://github.com/ruotianluo/ImageCaptioning.pytorch /tmp/peer
    python maint/peer_benchmark.py --peer /tmp/peer --threads 2 --json peer.json
    python scripts/benchmark.py --sections peak,train,decode --decoders lstm --modes additive \\
        --refiners '' --no-naive --threads 2 --repeats 5 --json ours.json   # right after: a pair

What runs and why:
- Its package is copied to a temporary folder under another name (its imports are relative; the
  name keeps it apart from this project's `captioning`). `--peer` is a working tree or a bare git
  dir (then `git archive HEAD`). Where `six` is not installed (imported by its utils for pickle
  helpers only, never on a timed path) a stand-in is put in sys.modules; the JSON says so.
- The model from its `models.setup(opt)` (caption_model=updown), the loss its
  `losses.LanguageModelCriterion`, the optimiser its `utils.misc.build_optimizer` (Adam, as its
  updown config), a training step as its LossWrapper makes it: the model on labels[..., :-1],
  the loss on labels[..., 1:]. Its vocabulary gets index 0 as bos/eos/pad, so vocab_size is
  --vocab - 1 and its logit layer has --vocab outputs, as ours.
- spi5: 5 captions an image, as it trains (it embeds each image once and repeats it); spi1: one
  caption an image, the benchmark's per-step shape. Teacher forcing over --len words.
- Greedy decoding: `model(..., mode='sample')`, greedy, under no_grad, with eos_idx = -1 so no
  caption ends early (the benchmark bans <eos> too). fc_feats are the regions' mean (its
  loader's path without fc features), made outside the timing.
- Gradient clipping is off (the benchmark's step does not clip) and denormals are left as they
  are (the peer does not flush them).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from captioning.errors import ArgumentParser, UserError, report_user_errors  # noqa: E402

PACKAGE = "peer_captioning"
NAME = "ruotianluo/ImageCaptioning.pytorch"


def copy_package(peer: Path, into: Path) -> str:
    """Its `captioning/` package as `into/PACKAGE`; -> its commit."""
    git = ["git", "-C", str(peer)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if (peer / "captioning" / "models").is_dir():
        shutil.copytree(peer / "captioning", into / PACKAGE)
    else:  # a bare git dir (a mirror): the files of its HEAD
        archive = subprocess.run([*git, "archive", "HEAD", "captioning"], capture_output=True)
        if archive.returncode != 0:
            raise UserError(f"--peer {peer}: neither a clone of {NAME} (no captioning/models/) nor a "
                            f"git dir with one ({archive.stderr.decode().strip()})")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(into / "archive", filter="data")
        shutil.move(str(into / "archive" / "captioning"), into / PACKAGE)
    return commit


def shim_six() -> list[str]:
    """A stand-in for `six` where it is missing; -> what was shimmed."""
    try:
        import six  # noqa: F401
        return []
    except ImportError:
        import pickle

        six = types.ModuleType("six")
        six.PY3 = True
        six.moves = types.SimpleNamespace(cPickle=pickle)
        sys.modules["six"], sys.modules["six.moves"] = six, six.moves
        return ["six (PY3=True, six.moves.cPickle=pickle)"]


def updown_opt(args) -> Namespace:
    """Only the fields its UpDown, loss and optimiser read; defaults of its opts.py where they
    are not the benchmark's shapes."""
    return Namespace(
        caption_model="updown", vocab_size=args.vocab - 1,
        vocab={str(i): f"w{i}" for i in range(1, args.vocab)},
        input_encoding_size=args.dim, rnn_size=args.dim, num_layers=2, drop_prob_lm=0.5,
        max_length=args.len, seq_length=args.len, fc_feat_size=args.feature_dim,
        att_feat_size=args.feature_dim, att_hid_size=args.dim, use_bn=0, logit_layers=1,
        bos_idx=0, eos_idx=-1, pad_idx=0, optim="adam", learning_rate=5e-4, optim_alpha=0.9,
        optim_beta=0.999, optim_epsilon=1e-8, weight_decay=0)


def timed(fn, warmup: int, repeats: int, sync) -> dict:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    # 4 significant figures, not 4 decimals: a step at a test's tiny shapes takes microseconds
    # on a fast CPU, and would round to 0 s (and an infinite rate)
    def sig(x: float) -> float:
        return float(f"{x:.4g}")

    return {"median_s": sig(statistics.median(times)), "min_s": sig(min(times)), "max_s": sig(max(times)),
            "repeats": repeats}


def run(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    tmp = Path(tempfile.mkdtemp(prefix="peer_"))
    try:
        commit = copy_package(Path(args.peer), tmp)
        shims = shim_six()
        sys.path.insert(0, str(tmp))
        models = __import__(f"{PACKAGE}.models", fromlist=["setup"])
        losses = __import__(f"{PACKAGE}.modules.losses", fromlist=["LanguageModelCriterion"])
        misc = __import__(f"{PACKAGE}.utils.misc", fromlist=["build_optimizer"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # imported: the modules stay loaded
    opt = updown_opt(args)
    model = models.setup(opt).to(device)
    crit = losses.LanguageModelCriterion()
    optimiser = misc.build_optimizer(model.parameters(), opt)
    att = torch.randn(args.batch, args.grid * args.grid, args.feature_dim, device=device)
    fc = att.mean(1)
    out = {"peer": NAME, "commit": commit, "torch": torch.__version__, "threads": args.threads,
           "device": device.type, "flush_denormal": False, "shims": shims, "train": {}, "decode": {},
           "opt": {"updown": {k: v for k, v in vars(opt).items() if k != "vocab"}},
           "shapes": {k: getattr(args, k) for k in ("batch", "grid", "feature_dim", "vocab", "len", "dim")}}
    for spi in args.seq_per_img:
        labels = torch.randint(1, args.vocab, (args.batch, spi, args.len + 1), device=device)
        labels[..., 0] = 0  # its bos
        masks = torch.ones_like(labels, dtype=torch.float)

        def step() -> None:
            model.train()
            optimiser.zero_grad()
            loss = crit(model(fc, att, labels[..., :-1], None), labels[..., 1:], masks[..., 1:])
            loss.backward()
            optimiser.step()

        t = timed(step, args.warmup, args.repeats, sync)
        captions = args.batch * spi
        out["train"][f"updown/spi{spi}"] = {**t, "captions_per_s": round(captions / t["median_s"], 2),
                                             "images_per_s": round(args.batch / t["median_s"], 2),
                                             "captions_per_step": captions}

    def greedy() -> None:
        model.eval()
        with torch.no_grad():
            model(fc, att, None, opt={"sample_method": "greedy", "beam_size": 1, "sample_n": 1},
                  mode="sample")

    t = timed(greedy, args.warmup, args.repeats, sync)
    out["decode"]["greedy/updown"] = {**t, "images_per_s": round(args.batch / t["median_s"], 2),
                                      "captions_per_s": round(args.batch / t["median_s"], 2)}
    return out


@report_user_errors
def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", required=True, help=f"a clone of {NAME} (a working tree or a bare git dir)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--grid", type=int, default=7)
    p.add_argument("--feature-dim", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--len", type=int, default=20)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--seq-per-img", type=lambda s: [int(x) for x in s.split(",")], default=[5, 1])
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None, help="write the results here too")
    args = p.parse_args(argv)
    if not Path(args.peer).is_dir():
        raise UserError(f"--peer {args.peer}: no such folder (clone {NAME} there first)")
    with contextlib.redirect_stdout(sys.stderr):  # its own prints (optional imports): stdout is the JSON
        out = run(args)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return out


if __name__ == "__main__":
    main()
