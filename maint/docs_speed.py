"""The docs' speed and memory figures (`make docs`, via maint/make_docs.py): docs/benchmarks.md's
tables from the measurements docs/figures.json lists (the benchmark's JSON per CPU kind, each pair
of runs against the peer, the CPU tricks' runs), docs/summary.md's speed and memory bullets, and
docs/gpu_and_cluster.md's estimate of a COCO epoch from docs/benchmark_cpu.json."""

from __future__ import annotations

import re
import statistics
from dataclasses import MISSING
from pathlib import Path

import docs_records as records
from docs_records import MARK, MEASUREMENTS, fmt, md_table, measurement_names

from captioning.benchmark import config_fields

ROOT = Path(__file__).resolve().parents[1]


FIGURES = ROOT / "docs" / "figures.json"


BENCHMARKS = "docs/benchmarks.md"


BENCHMARK_CPU = "docs/benchmark_cpu"  # .json: a benchmark's result; .md: its tables


GPU_DOC = "docs/gpu_and_cluster.md"


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else ""


def _pair(ours: float | None, peer: float | None) -> str:
    return f"{fmt(ours)} / {fmt(peer)}" if ours and peer else ""


def _tflops(flop_per_s: float | None) -> str:
    return "" if flop_per_s is None else f"{flop_per_s / 1e12:.3g}"


def command(config: dict) -> str:
    """The scripts/benchmark.py command that made a result: its flags that differ from the
    defaults (the result's `config` records every setting)."""
    flags = []
    for f in config_fields():
        if f.name not in config:
            continue
        value, default = config[f.name], (None if f.default is MISSING else f.default)
        if value == default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, list):  # older results recorded lists where the flag takes a, b
            value = ",".join(map(str, value))
        flags.append(flag if value is True else f"{flag} ''" if value == "" else f"{flag} {value}")
    return " ".join(["python scripts/benchmark.py", *flags])


def _ours(result: dict) -> tuple[float | None, float | None]:
    """(LSTM + additive training captions/s in the precision the run chose, greedy images/s)."""
    precision = result.get("default_precision", "fp32")
    train = result.get("train", {}).get(f"lstm/additive/{precision}", {})
    greedy = result.get("decode", {}).get("greedy_lstm", {})
    return train.get("captions_per_s"), greedy.get("images_per_s")


MACHINE_COLUMNS = ["CPU", "date, commit", "precision chosen", "matmul peak fp32 / bf16, TFLOP/s",
                   "LSTM + additive training, captions/s", "x naive", "greedy x naive",
                   "beam 5: batched x per image", "dot / additive training (LSTM)", "result"]


def machines_table(figures: dict) -> str:
    rows, commands = [], []
    for m in figures["machines"]:
        r = records.read(m["file"])
        precision = r.get("default_precision", "fp32")
        ratios, peak = r.get("ratios", {}), r.get("peak", {})
        date = (m.get("date") or r.get("date", ""))[:10]
        commit = m.get("commit") or str(r.get("commit", ""))[:7]
        link = f"[{Path(m['file']).name}]({Path(m['file']).relative_to('docs')})"
        rows.append([m["cpu"], f"{date}, {commit}", precision,
                     f"{_tflops(peak.get('fp32_flop_per_s'))} / {_tflops(peak.get('bf16_flop_per_s'))}",
                     fmt(_ours(r)[0]), fmt(ratios.get("train_lstm_additive_default_vs_naive_fp32"), 2),
                     fmt(ratios.get("greedy_lstm_vs_naive"), 2),
                     fmt(ratios.get("beam_batched_vs_per_image_lstm"), 2),
                     fmt(ratios.get(f"train_lstm_dot_over_additive_{precision}"), 2), link])
        commands.append(f"- {Path(m['file']).name}: `{command(r['config'])}`")
    return (md_table(MACHINE_COLUMNS, "lllrrrrrrl", rows)
            + "\n\nEach result's command (its `config` holds every setting):\n\n" + "\n".join(commands))


PEER_COLUMNS = ["CPU", "pair (UTC)", "LSTM + additive training, 64 captions a step: ours / peer, captions/s",
                "x peer", "64 images x 5 captions: ours / peer", "x peer",
                "greedy LSTM: ours / peer, images/s", "x peer"]


def _pair_figures(ours: dict, peer: dict) -> tuple[float | None, float | None, float | None, float | None]:
    """(our training captions/s, the peer's, our greedy images/s, the peer's) of one pair."""
    train, greedy = _ours(ours)
    peer_train = peer["train"].get("updown/spi1", {}).get("captions_per_s")
    peer_greedy = peer.get("decode", {}).get("greedy/updown", {}).get("images_per_s")
    return train, peer_train, greedy, peer_greedy


def peer_table(figures: dict) -> str:
    rows = []
    for p in figures["peer"]["pairs"]:
        ours, peer = records.read(p["ours"]), records.read(p["peer"])
        train, peer_train, greedy, peer_greedy = _pair_figures(ours, peer)
        spi5 = spi5_peer = None
        if "ours_spi5" in p:
            spi5 = _ours(records.read(p["ours_spi5"]))[0]
            spi5_peer = peer["train"].get("updown/spi5", {}).get("captions_per_s")
        links = ", ".join(f"[{k}]({Path(p[k]).relative_to('docs')})"
                          for k in ("ours", "ours_spi5", "peer") if k in p)
        note = f", {p['note']}" if p.get("note") else ""
        rows.append([p["cpu"], f"{p.get('when') or ours['date'][:16]}{note} ({links})",
                     _pair(train, peer_train), _x(train, peer_train), _pair(spi5, spi5_peer),
                     _x(spi5, spi5_peer), _pair(greedy, peer_greedy), _x(greedy, peer_greedy)])
    return md_table(PEER_COLUMNS, "lllrlrlr", rows)


def _span(values: list[float]) -> str:
    """'3.0x' for one value; the median and the range for several ('3.0x, 2.9-4.8x')."""
    lo, hi, mid = min(values), max(values), statistics.median(values)
    return f"{mid:.1f}x" if len(values) == 1 else f"{mid:.1f}x (median; {lo:.1f}-{hi:.1f}x)"


def summary_speed(figures: dict) -> str:
    """docs/summary.md's bullets on speed and memory, from the benchmark result, the peer pairs
    and the feature store's memory record (each number once, in its JSON)."""
    machine = next(m for m in figures["machines"] if m["file"] == f"{BENCHMARK_CPU}.json")
    ratios = records.read(machine["file"])["ratios"]
    beam = [ratios[f"beam_batched_vs_per_image_{d}"] for d in ("lstm", "transformer")]
    by_cpu: dict[str, tuple[list[float], list[float]]] = {}
    for p in figures["peer"]["pairs"]:
        pair = _pair_figures(records.read(p["ours"]), records.read(p["peer"]))
        train, peer_train, greedy, peer_greedy = pair
        trains, greedies = by_cpu.setdefault(p["cpu"], ([], []))
        if train and peer_train:
            trains.append(train / peer_train)
        if greedy and peer_greedy:
            greedies.append(greedy / peer_greedy)
    store = records.read(f"{MEASUREMENTS}/store_memory.json")["rows"]
    lines = [
        f"- Speed ({machine['cpu']}): the LSTM training step with keys prepared once per image is "
        f"{ratios['train_lstm_additive_fp32_vs_naive_fp32']:.2f}x the naive tutorial-style step; batched "
        f"beam search is {min(beam):.1f}-{max(beam):.1f}x one image at a time; the Transformer's KV "
        f"cache makes decoding {ratios['transformer_cache_speedup']:.1f}x faster "
        "([benchmarks.md](benchmarks.md)).",
        f"- Against {figures['peer']['name']} at the same shapes, side by side "
        "([benchmarks.md](benchmarks.md), the peer table; our precision chosen by measurement):"]
    lines += [f"  {cpu}: LSTM + additive training {_span(t)} its captions/s, greedy decoding {_span(g)} "
              f"({len(t)} pair{'s' if len(t) > 1 else ''})." for cpu, (t, g) in by_cpu.items()]
    lines.append(
        f"- Real data: features live in an on-disk store read row by row; with "
        f"{store[-1]['images'] / store[0]['images']:.0f}x the images training needs "
        f"{store[-1]['train_mb'] / store[0]['train_mb']:.2f}x the memory and evaluation "
        f"{store[-1]['eval_mb'] / store[0]['eval_mb']:.2f}x ([benchmarks.md](benchmarks.md), the feature "
        "store).")
    return "\n".join(lines)


# COCO's Karpathy split with restval: training images x 5 captions; every image of the dataset
# (train2014 + val2014) is extracted once.
COCO_TRAIN_CAPTIONS, COCO_IMAGES = 113_287 * 5, 123_287


def coco_estimate() -> str:
    """docs/gpu_and_cluster.md's estimate of a COCO epoch on the benchmark's CPU: training steps
    at its LSTM + additive captions/s, feature extraction at its encoder's images/s."""
    result = records.read(f"{BENCHMARK_CPU}.json")
    train = result["train"][f"lstm/additive/{result['default_precision']}"]["captions_per_s"]
    encode = result["encoder"]["from_files"]["images_per_s"]
    return (f"- training steps: {COCO_TRAIN_CAPTIONS:,} captions at {train:.1f} captions/s, about "
            f"{COCO_TRAIN_CAPTIONS / train / 60:.0f} minutes an epoch;\n"
            f"- feature extraction, once (ResNet-50 at 224 px from JPEG files): {COCO_IMAGES:,} images at "
            f"{encode:.1f} images/s, about {COCO_IMAGES / encode / 3600:.1f} h;")


def cpu_speed_table(figures: dict) -> str:
    """Each CPU trick's speed-up (time without / with) per measured machine, from the results
    of `scripts/benchmark.py --sections cpu_speed` that figures.json lists."""
    runs = [(m, records.read(m["file"])) for m in figures["cpu_speed"]]
    keys = list(dict.fromkeys(k for _, r in runs for k in r["cpu_speed"]))
    rows = [[k.replace("/", " / ")] + [fmt(r["cpu_speed"].get(k, {}).get("speedup"), 2) for _, r in runs]
            for k in keys]
    header = ["trick / where / precision"] + [
        f"{m['cpu']} ([{Path(m['file']).name}]({Path(m['file']).relative_to('docs')}))" for m, _ in runs]
    env = ["".join(f"{k}={v} " for k, v in r.get("isa_limits", {}).items()) for _, r in runs]
    commands = [f"- {Path(m['file']).name}: `{e}{command(r['config'])}`" for (m, r), e in zip(runs, env)]
    return md_table(header, "l" + "r" * len(runs), rows) + "\n\n" + "\n".join(commands)


TABLES = {"machines": machines_table, "peer": peer_table, "cpu-speed": cpu_speed_table}


def render_figures(text: str, figures: dict) -> str:
    records = set(measurement_names())

    def table(m: re.Match) -> str:
        if m.group(2) in records:
            return m.group(0)  # filled from its record (generated)
        if m.group(2) not in TABLES:
            raise SystemExit(f"error: {BENCHMARKS}: unknown table figures:{m.group(2)}; "
                             f"known: {', '.join(TABLES)}")
        return f"{m.group(1)}\n{TABLES[m.group(2)](figures)}\n{m.group(4)}"

    return MARK.sub(table, text)
