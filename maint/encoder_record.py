"""Keep a grid's encoder file in the grid's record, or put it back from there: the file its
config pins (encoder.weights_path, checked against encoder.weights_sha256) goes to
results/<grid>/encoder/ in parts under 50 MB with a manifest of their sha256
(captioning/compare/encoder_record.py). `scripts/compare.py` restores it by itself when the file
is absent; `restore` does the same by hand.

    python maint/encoder_record.py store convergence_learned    # then commit results/<grid>/encoder/
    python maint/encoder_record.py restore convergence_learned
"""

from __future__ import annotations

from pathlib import Path

from captioning.compare.encoder_record import restore, store
from captioning.errors import ArgumentParser, UserError, report_user_errors

ROOT = Path(__file__).resolve().parents[1]


def grid_encoder(grid: str) -> dict:
    """The encoder settings of experiment=<grid>, resolved (its weights path, its pin)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from captioning.paths import conf_dir
    from captioning.schema import register

    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={grid}", "paths.output_dir=unused"])
    encoder = OmegaConf.to_container(cfg.encoder, resolve=True)
    if not (encoder.get("pretrained") and encoder.get("weights_path") and encoder.get("weights_sha256")):
        raise UserError(f"experiment={grid}: no pinned weights file (encoder.weights_path and "
                        "encoder.weights_sha256): there is no one file to keep")
    return encoder


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> str:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["store", "restore"])
    parser.add_argument("grid", help="the grid's experiment, also its folder under results/")
    args = parser.parse_args(argv)
    encoder = grid_encoder(args.grid)
    folder = ROOT / "results" / args.grid / "encoder"
    weights = ROOT / Path(encoder["weights_path"]).expanduser()  # paths.data_dir: from this checkout
    if args.action == "store":
        manifest = store(weights, folder, encoder["weights_sha256"])
        done = (f"{weights} -> {folder.relative_to(ROOT)}/: {len(manifest['parts'])} parts, "
                f"{manifest['bytes']:,} bytes, sha256 {manifest['sha256'][:16]}...; commit that folder")
    else:
        done = restore(folder, weights, encoder["weights_sha256"])
    print(done)
    return done


if __name__ == "__main__":
    main()
