"""How a run is laid out by its launcher: one run dir per torchrun or SLURM launch, loader
workers sized by `data.num_workers=auto`."""

import re
from types import SimpleNamespace

import torch

from captioning.provenance import run_stamp


def test_run_stamp_names_one_dir_per_launch(monkeypatch):
    for var in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_STEP_ID"):
        monkeypatch.delenv(var, raising=False)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{6}", run_stamp())  # a plain run
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert not run_stamp().startswith("slurm")  # one task: the timestamp (sweeps stay apart)
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    assert run_stamp() == "slurm-123-0"  # every task of the step: the same dir
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    assert run_stamp() == "torchrun-abc"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun without --rdzv-id
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert re.fullmatch(r"torchrun-29500-\d+", run_stamp())


def test_auto_workers_are_none_on_a_cpu_and_sized_on_a_gpu(monkeypatch):
    from captioning.lit.datamodule import CaptionDataModule

    dm = CaptionDataModule({"num_workers": "auto"}, {})
    assert dm._workers() == 0  # no trainer yet
    fake = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")), num_devices=1)
    dm.trainer = fake
    assert dm._workers() == 0
    fake.strategy.root_device = torch.device("cuda", 0)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert dm._workers() == 4
    fake.num_devices = 8  # 8 processes share 16 CPUs
    assert dm._workers() == 1
    assert CaptionDataModule({"num_workers": 3}, {})._workers() == 3
