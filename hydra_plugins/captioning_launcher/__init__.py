"""`hydra/launcher=local`: the project's launcher for sweeps on one machine (local_launcher.py)."""
