"""Speed-up ratios (each of two figures from one process) and the Markdown tables."""

from __future__ import annotations


def ratios(results: dict, args) -> dict:
    """The speed-ups, each a ratio of two figures from this process."""
    tr, de, r = results["train"], results["decode"], {}
    cps = {k: v["captions_per_s"] for k, v in tr.items()}

    def faster(table: dict, slow: str, fast: str) -> float:  # median time slow / fast
        return table[slow]["median_s"] / table[fast]["median_s"]

    if "lstm/additive/fp32/naive" in cps:
        naive32 = cps["lstm/additive/fp32/naive"]
        r["train_lstm_additive_fp32_vs_naive_fp32"] = cps["lstm/additive/fp32"] / naive32
        r["train_lstm_additive_bf16_vs_naive_bf16"] = (
            cps["lstm/additive/bf16"] / cps["lstm/additive/bf16/naive"])
        best = cps[f"lstm/additive/{results['default_precision']}"]
        r["train_lstm_additive_default_vs_naive_fp32"] = best / naive32
        r["train_lstm_additive_bf16_vs_fp32"] = cps["lstm/additive/bf16"] / cps["lstm/additive/fp32"]
    for name in args.decoder_list:
        for p in ("fp32", "bf16"):
            dot, additive = f"{name}/dot/{p}", f"{name}/additive/{p}"
            if dot in cps and additive in cps:
                r[f"train_{name}_dot_over_additive_{p}"] = cps[dot] / cps[additive]
        if f"greedy_{name}" in de:
            r[f"greedy_{name}_vs_naive"] = faster(de, f"greedy_{name}_naive", f"greedy_{name}")
            if f"greedy_{name}_unpacked" in de:
                r[f"greedy_{name}_packed_vs_unpacked"] = faster(
                    de, f"greedy_{name}_unpacked", f"greedy_{name}")
            tag = f"beam{args.beam}_{name}"
            r[f"beam_batched_vs_per_image_{name}"] = faster(de, f"{tag}_per_image", tag)
    if "greedy_transformer_nocache" in de:
        r["transformer_cache_speedup"] = faster(de, "greedy_transformer_nocache", "greedy_transformer")
    enc = results.get("encoder", {})
    if "from_files" in enc:
        r["encoder_files_vs_bare"] = (
            enc["from_files"]["images_per_s"] / enc["bare_forward"]["images_per_s"])
    return r


def markdown(results: dict) -> str:
    c = results["config"]
    per_image = c.get("captions_per_image", 1)  # absent from JSONs of before the option
    spi = f" ({per_image} captions per image in training)" if per_image > 1 else ""
    lines = [f"Shapes: batch {c['batch']}{spi}, {c['grid']}x{c['grid']}x{c['feature_dim']} features, "
             f"width {c['d_model']}, vocabulary {c['vocab']}, {c['tokens']} tokens; "
             f"{results['threads']} threads on {results['device']}; default precision "
             f"{results['default_precision']}.", ""]
    peak = results["peak"]
    lines += ["| matmul peak | TFLOP/s |", "|---|---:|"]
    # 3 significant digits: a CPU without bf16 kernels (AVX2) sustains well under 0.001 TFLOP/s
    lines += [f"| {k.split('_')[0]} | {v / 1e12:.3g} |" for k, v in peak.items()]
    if results["train"]:
        lines += ["", "| training step (fwd+bwd+AdamW) | captions/s | median s | spread s | MFU |",
                  "|---|---:|---:|---:|---:|"]
        for k, t in results["train"].items():
            mfu = f"{t['mfu']:.0%}" if "mfu" in t else ""
            if t.get("mfu", 0) > 1:  # the square matmul ran a slower kernel than the step's
                mfu = "n/a: the step beat the measured peak"
            lines.append(f"| {k} | {t['captions_per_s']:.1f} | {t['median_s']:.3f} | "
                         f"{t['min_s']:.3f}-{t['max_s']:.3f} | {mfu} |")
    if results["decode"]:
        lines += ["", "| decoding | images/s | median s | spread s |", "|---|---:|---:|---:|"]
        for k, t in results["decode"].items():
            lines.append(f"| {k} | {t['images_per_s']:.1f} | {t['median_s']:.3f} | "
                         f"{t['min_s']:.3f}-{t['max_s']:.3f} |")
    enc = results.get("encoder", {})
    if "from_files" in enc:
        head = f"encoder ({c['encoder']}, {c['image_size']} px, {enc['dtype']})"
        lines += ["", f"| {head} | images/s | median s |", "|---|---:|---:|"]
        for k in ("from_files", "bare_forward"):
            lines.append(f"| {k} | {enc[k]['images_per_s']:.1f} | {enc[k]['median_s']:.3f} |")
    if results.get("cpu_speed"):
        lines += ["", "| CPU trick / where / precision | with s | without s | speed-up |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {k} | {t['on_s']:.3f} | {t['off_s']:.3f} | {t['speedup']:.2f}x |"
                  for k, t in results["cpu_speed"].items()]
    lines += ["", "| ratio | x |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in results["ratios"].items()]
    return "\n".join(lines) + "\n"
