"""Does memory stay flat as the dataset grows, and does the feature store cost training speed?

    python scripts/measure_store.py --workdir /tmp/store-measure --sizes 5000 40000
    python scripts/measure_store.py --workdir /tmp/store-measure --sizes 5000 --speed-only
    python scripts/measure_store.py --workdir /tmp/store-measure --sizes 5000 40000 --precomputed

For each size it writes a Karpathy-style dataset whose feature store is filled with generated
7x7x2048 float16 features (no ResNet runs; the image files are empty placeholders, never read),
then runs the real entry points as a user would, `train.py` (one epoch, limited batches,
DataLoader workers on) and `scripts/evaluate.py`, sampling the anonymous resident memory
(RssAnon: not page cache, so memory-mapped features do not count) of the whole process tree.
The speed section times training steps, data loading included, from the store and from the
same features in memory, warm and cold (the store's pages dropped first). Delete --workdir
afterwards: 40,000 images make an 8 GB store.

--precomputed measures encoder=precomputed instead: per image a bottom-up-style <id>.npz (36
regions x 2048 float16 and their boxes) is generated, and the training run itself copies them
into its store (that copy is part of what is measured). Twice the disk: files and store.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from captioning.errors import ArgumentParser, report_user_errors

ROOT = Path(__file__).resolve().parents[1]
WORDS = "a man woman dog cat red blue small large sits runs on the in with near park street".split()


def tree_rss_anon_kb(pid: int) -> int:
    """RssAnon of pid and all its descendants (kB), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def run_sampled(cmd: list[str], log: Path) -> dict:
    """Run cmd, sampling the process tree's RssAnon every 0.1 s -> peak (MB), wall (s)."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "WANDB_MODE": "disabled"})
        peak = 0

        def sample() -> None:
            nonlocal peak
            while proc.poll() is None:
                peak = max(peak, tree_rss_anon_kb(proc.pid))
                time.sleep(0.1)

        thread = threading.Thread(target=sample)
        thread.start()
        proc.wait()
        thread.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}); see {log}")
    return {"peak_rss_anon_mb": round(peak / 1024, 1), "wall_s": round(time.perf_counter() - start, 1)}


def make_dataset(folder: Path, images: int, held_out: int = 200) -> Path:
    """dataset.json (train / val / test) with placeholder image files and five captions each;
    kept when it exists (its modification time keys the store: a rewrite means a new store)."""
    path = folder / "dataset.json"
    if path.exists():
        return path
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    entries = []
    for i in range(images):
        (folder / "images" / f"{i}.jpg").touch()
        split = "val" if i < held_out else "test" if i < 2 * held_out else "train"
        sentences = [{"raw": " ".join(rng.choice(WORDS, 8))} for _ in range(5)]
        entries.append({"filepath": "images", "filename": f"{i}.jpg", "imgid": i, "split": split,
                        "sentences": sentences})
    path.write_text(json.dumps({"images": entries}))
    return path


def overrides(json_path: Path, cache: Path) -> list[str]:
    return ["data=flickr8k", f"data.json_path={json_path}", f"data.image_root={json_path.parent}",
            f"data.cache_dir={cache}", "encoder.pretrained=false", "encoder.image_size=224",
            "data.min_word_freq=1", "data.num_workers=2"]


def precomputed_overrides(json_path: Path, cache: Path, feats: Path) -> list[str]:
    return ["data=flickr8k", f"data.json_path={json_path}", f"data.image_root={json_path.parent}",
            f"data.cache_dir={cache}", "encoder=precomputed", f"encoder.path={feats}",
            "data.min_word_freq=1", "data.num_workers=2"]


def write_region_files(folder: Path, images: int, regions: int = 36, dim: int = 2048) -> Path:
    """<id>.npz per image (np.savez: `features` (regions, dim) float16, `boxes` (regions, 4)),
    the layout of a bottom-up feature folder; kept when complete."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(images):
        path = folder / f"{i}.npz"
        if path.exists():
            continue
        feats = (np.abs(rng.standard_normal((regions, dim), dtype=np.float32)) * 0.6).astype(np.float16)
        corners = np.sort(rng.random((regions, 2, 2), dtype=np.float32), axis=1)  # x, y sorted
        boxes = corners.transpose(0, 2, 1).reshape(regions, 4)[:, [0, 2, 1, 3]]  # x1 y1 x2 y2
        np.savez(path, features=feats, boxes=boxes)
    return folder


def fill_store(over: list[str], batch: int = 512) -> Path:
    """Generated features (shaped like ResNet's: non-negative, mean ~0.5) in every row."""
    from hydra import compose, initialize_config_dir

    from captioning.schema import register

    register()
    from omegaconf import OmegaConf

    from captioning.data.prepare import dataset_store

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose("train", overrides=over + ["paths.output_dir=x"]),
                                     resolve=True)
    store = dataset_store(cfg["data"], cfg["encoder"])
    rows, cells, dim = store.manifest["shape"]
    rng = np.random.default_rng(1)
    for start in range(store.rows_done, rows, batch):
        n = min(batch, rows - start)
        feats = np.abs(rng.standard_normal((n, cells, dim), dtype=np.float32)) * 0.6
        store.write(start, feats.astype(np.float16), [""] * n)
    return store.features_path


def speed(over: list[str], features_path: Path, steps: int) -> dict:
    """Seconds for `steps` training steps (loading included): store warm, store cold, memory."""
    import torch
    from hydra import compose, initialize_config_dir

    from captioning.schema import register

    register()
    from omegaconf import OmegaConf
    from torch.utils.data import DataLoader

    from captioning.data.datasets import Collate, ImageCaptions
    from captioning.data.prepare import prepare_data
    from captioning.models import build_captioner

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose("train", overrides=over + ["paths.output_dir=x"]),
                                     resolve=True)
    data = prepare_data(cfg["data"], cfg["encoder"])
    stored = data.features

    def epoch(features) -> float:
        data.features = features
        torch.manual_seed(0)
        model = build_captioner(cfg, len(data.vocab))
        model.normalizer.load_state_dict(data.normalizer.state_dict())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = DataLoader(ImageCaptions(data, "train"), batch_size=cfg["data"]["batch_size"],
                            shuffle=True, num_workers=2, collate_fn=Collate(data, data.vocab.pad),
                            generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        for k, batch in enumerate(loader):
            if k == steps:
                break
            tokens = batch["tokens"]
            lengths = (tokens[:, 1:] != data.vocab.pad).sum(1)
            logits, _ = model(batch["features"], tokens[:, :-1], lengths, batch["image_index"])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(),
                                                     ignore_index=data.vocab.pad)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - start

    def drop_pages() -> None:
        fd = os.open(features_path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

    drop_pages()
    cold = epoch(stored)
    warm = epoch(stored)
    memory = epoch(np.asarray(stored[:]))  # the same features, in RAM
    return {"steps": steps, "store_cold_s": round(cold, 2), "store_warm_s": round(warm, 2),
            "memory_s": round(memory, 2), "warm_ratio": round(memory / warm, 3),
            "cold_ratio": round(memory / cold, 3), "loader": "num_workers=2, prefetch_factor=2"}


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True, help="where datasets, stores and runs go (delete after)")
    p.add_argument("--sizes", type=int, nargs="+", default=[5000, 40000])
    p.add_argument("--train-batches", type=int, default=40, help="training batches in the memory runs")
    p.add_argument("--speed-steps", type=int, default=60, help="training steps per speed run")
    p.add_argument("--speed-only", action="store_true", help="only the speed section (first size)")
    p.add_argument("--precomputed", action="store_true",
                   help="encoder=precomputed: generated region files, copied by the training run")
    p.add_argument("--json", default=None, help="write the results here too")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    results: dict = {"memory": {}, "speed": None}
    for size in args.sizes:
        folder = work / f"n{size}"
        if args.precomputed:
            files = write_region_files(folder / "regions", size)
            over = precomputed_overrides(make_dataset(folder, size), folder / "cache", files)
        else:
            over = overrides(make_dataset(folder, size), folder / "cache")
            features = fill_store(over)
            print(f"{size} images: store {features.stat().st_size / 1e9:.2f} GB at {features}", flush=True)
        if args.speed_only:
            break
        run = folder / "run"
        train = run_sampled([sys.executable, "train.py", *over, "trainer.max_epochs=1",
                             f"trainer.limit_train_batches={args.train_batches}",
                             "trainer.limit_val_batches=2", "trainer.limit_test_batches=2",
                             "trainer.enable_progress_bar=false", "logger=none", "decode.beam_size=1",
                             f"hydra.run.dir={run}"], folder / "train.log")
        evaluate = run_sampled([sys.executable, "scripts/evaluate.py",
                                f"checkpoint={run}/checkpoints/last.ckpt", "split=test",
                                "decode.beam_size=1", "meteor=false", f"output_dir={folder / 'eval'}"],
                               folder / "evaluate.log")
        features = next((folder / "cache").glob("store_*/features.npy"))
        results["memory"][size] = {"store_gb": round(features.stat().st_size / 1e9, 2),
                                   "train": train, "evaluate": evaluate}
        print(json.dumps({size: results["memory"][size]}), flush=True)
    if args.precomputed:  # the speed section compares a store with memory: the same either way
        print(json.dumps(results, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return results
    first = work / f"n{args.sizes[0]}"
    feats = next((first / "cache").glob("store_*/features.npy"))
    results["speed"] = speed(overrides(first / "dataset.json", first / "cache"), feats, args.speed_steps)
    print(json.dumps(results, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
