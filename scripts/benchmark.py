"""Speed on synthetic tensors (decoder training and decoding, feature extraction, the CPU tricks); the
sections and what they measure are described in captioning/benchmark/__init__.py.

    python scripts/benchmark.py --threads 2 --json bench.json --markdown bench.md
    python scripts/benchmark.py --sections train --modes additive,dot --decoders lstm
    python scripts/benchmark.py --sections cpu_speed --threads 2   # each CPU trick on and off

Torch-only: no Hydra, Lightning, wandb or nltk is imported, so it runs on any PyTorch machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from captioning.benchmark import BenchConfig, config_fields, markdown, run_benchmark
from captioning.errors import ArgumentParser, report_user_errors


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in config_fields():  # one flag per BenchConfig field: defaults live there only
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            p.add_argument(flag, action="store_true", help=f.metadata.get("help"))
        else:
            kind = int if f.type in ("int", "int | None") else str
            p.add_argument(flag, type=kind, default=f.default,
                           help=f"{f.metadata.get('help', '')} (default: {f.default})".strip())
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--markdown", default=None, help="write the tables here")
    args = vars(p.parse_args(argv))
    out_json, out_md = args.pop("json"), args.pop("markdown")
    try:
        results = run_benchmark(BenchConfig(**args))
    except ValueError as err:
        p.error(str(err))
    table = markdown(results)
    print(table)
    if out_json:
        Path(out_json).write_text(json.dumps(results, indent=2))
    if out_md:
        Path(out_md).write_text(table)
    return results


if __name__ == "__main__":
    main()
