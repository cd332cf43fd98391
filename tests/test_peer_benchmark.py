"""maint/peer_benchmark.py's mechanics, on a stand-in for the peer's package with its interface
(models.setup, modules.losses.LanguageModelCriterion, utils.misc.build_optimizer, forward with
mode='sample'): its package copied from a working tree or a bare git dir, its prints kept off
stdout (the JSON), a training step and greedy decoding timed at the shapes asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL = '''
import torch
import torch.nn as nn

print("an optional import of the peer is missing")  # as its own modules do, on stdout


class UpDown(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.opt = opt
        self.att = nn.Linear(opt.att_feat_size, opt.rnn_size)
        self.logit = nn.Linear(opt.rnn_size, opt.vocab_size + 1)

    def forward(self, fc, att, seq=None, masks=None, opt=None, mode="forward"):
        h = self.att(att).mean(1)  # (B, D)
        if mode == "sample":
            assert opt["sample_method"] == "greedy"
            return self.logit(h).argmax(-1)[:, None].expand(-1, self.opt.max_length), None
        spi = seq.shape[1]
        steps = seq.shape[2]
        return torch.log_softmax(self.logit(h), -1)[:, None, None].expand(-1, spi, steps, -1).reshape(
            -1, steps, self.opt.vocab_size + 1)


def setup(opt):
    assert opt.caption_model == "updown"
    return UpDown(opt)
'''
LOSS = '''
import torch.nn as nn


class LanguageModelCriterion(nn.Module):
    def forward(self, input, target, mask):
        target = target.reshape(-1, target.shape[-1])
        mask = mask.reshape(-1, mask.shape[-1])
        return -(input.gather(2, target.unsqueeze(2)).squeeze(2) * mask).sum() / mask.sum()
'''
MISC = '''
import six  # noqa: F401  (the peer's utils import it)
import torch


def build_optimizer(params, opt):
    return torch.optim.Adam(params, opt.learning_rate)
'''


def _peer(tmp_path: Path) -> Path:
    peer = tmp_path / "peer"
    for rel, text in {"captioning/__init__.py": "", "captioning/models/__init__.py": MODEL,
                      "captioning/modules/__init__.py": "", "captioning/modules/losses.py": LOSS,
                      "captioning/utils/__init__.py": "", "captioning/utils/misc.py": MISC}.items():
        (peer / rel).parent.mkdir(parents=True, exist_ok=True)
        (peer / rel).write_text(text)
    git = ["git", "-C", str(peer), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(peer)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "peer"], check=True)
    return peer


@pytest.mark.parametrize("bare", [False, True], ids=["working tree", "bare git dir"])
def test_the_peer_is_timed_from_its_clone(tmp_path, bare):
    peer = _peer(tmp_path)
    if bare:
        subprocess.run(["git", "clone", "-q", "--bare", str(peer), str(tmp_path / "bare")], check=True)
        peer = tmp_path / "bare"
    done = subprocess.run([sys.executable, str(ROOT / "maint" / "peer_benchmark.py"), "--peer", str(peer),
                           "--threads", "1", "--batch", "4", "--vocab", "50", "--len", "3", "--dim", "16",
                           "--feature-dim", "32", "--repeats", "2", "--json", str(tmp_path / "peer.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)  # stdout is the JSON alone: its print went to stderr
    assert "optional import" in done.stderr
    assert out == json.loads((tmp_path / "peer.json").read_text())
    assert set(out["train"]) == {"updown/spi5", "updown/spi1"}
    assert out["train"]["updown/spi5"]["captions_per_step"] == 20
    assert out["train"]["updown/spi1"]["repeats"] == 2
    assert out["decode"]["greedy/updown"]["images_per_s"] > 0
    assert out["opt"]["updown"]["vocab_size"] == 49 and out["opt"]["updown"]["eos_idx"] == -1
    assert len(out["commit"]) == 40
