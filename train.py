"""Train a captioner: `python train.py attention=additive decoder=lstm seed=1`.

The entry point lives in captioning/cli.py, shared with the installed commands
(`captioning-train`, `python -m captioning`); it returns the best validation score, the
objective of a sweep."""

from captioning.cli import main

if __name__ == "__main__":
    main()
