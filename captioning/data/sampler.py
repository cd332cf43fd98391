"""The training order: a shuffle that is a pure function of (seed, epoch), so a resumed run can
start again exactly where a killed one stopped, mid-epoch, without replaying any RNG."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class EpochShuffle(Sampler[int]):
    """Indices 0..n-1 in the order torch.randperm gives for seed (seed, epoch), this rank's share
    (every `world`-th index from `rank`, the permutation padded by wrapping so every rank gets
    the same count, as DistributedSampler does).

    Its own generator: the global RNG (dropout) is never touched, so the model's random stream
    does not depend on how many epochs or iterators the loader has started. `start_at(epoch, k)`
    makes the next iteration of that epoch skip its first k indices (a resume); the trainer's
    `set_epoch` moves to another epoch and forgets any skip meant for the old one."""

    def __init__(self, n: int, seed: int, rank: int = 0, world: int = 1, with_epoch: bool = False) -> None:
        self.n, self.seed, self.rank, self.world = n, seed, rank, world
        self.with_epoch = with_epoch  # yield (epoch, index): for datasets whose items depend on it
        self.epoch, self._skip = 0, 0

    def __len__(self) -> int:
        return -(-self.n // self.world)  # ceil: padded to equal shares

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self._skip = epoch, 0

    def start_at(self, epoch: int, skip: int) -> None:
        self.epoch, self._skip = epoch, skip

    def order(self, epoch: int) -> list[int]:
        """This rank's indices for an epoch, from its start."""
        g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        perm = torch.randperm(self.n, generator=g).tolist()
        total = len(self) * self.world
        perm += perm[: total - self.n]  # pad by wrapping (only when n % world != 0)
        return perm[self.rank:total:self.world]

    def __iter__(self) -> Iterator[int]:
        skip, self._skip = self._skip, 0  # a skip applies to one iteration only
        order = self.order(self.epoch)[skip:]
        yield from ((self.epoch, k) for k in order) if self.with_epoch else order
