"""A grid's cells as data: which runs a compare.* block names (decoders x dims x modes x seeds,
within its limits, each at its rate), each cell's label and the Hydra overrides that make it out
of the experiment's base config. Nothing here trains or reads a file (compare/grid.py runs them)."""

from __future__ import annotations

from dataclasses import dataclass

BLIND = "blind"  # the attention label of a blind cell (features zeroed; attention irrelevant)


def group_of(entry: dict) -> str:
    """"decoder/dims/attention" of anything with those keys (a cell, a report's row)."""
    return f"{entry['decoder']}/{entry['dims']}/{entry['attention']}"


@dataclass(frozen=True, order=True)
class Cell:
    decoder: str
    dims: str
    attention: str
    seed: int
    lr: float = 0.0  # the peak learning rate (optim.optimizer.lr); 0: the base config's

    @property
    def label(self) -> str:
        rate = f"/lr{self.lr:g}" if self.lr else ""
        return f"{self.group}/s{self.seed}{rate}"

    @property
    def group(self) -> str:
        """decoder/dims/attention: the cells that differ only in seed and rate (a compare.rates
        key, a row of the sweep)."""
        return group_of(vars(self))

    def values(self) -> dict[str, int | float]:
        """What this cell sets by value, not by choosing a config file: its seed and, if it has
        one, its rate (GridRunner._query sets them after composing)."""
        return {"seed": self.seed, **({"optim.optimizer.lr": float(f"{self.lr:g}")} if self.lr else {})}

    def overrides(self, dims: dict[str, list[str]],
                  decoders: dict[str, list[str]] | None = None) -> list[str]:
        """Hydra overrides that make this cell out of the experiment's base config: its dims'
        settings and its decoder's (compare.decoder_settings, e.g. its step budget)."""
        if self.dims not in dims:
            raise ValueError(f"compare.dim_settings has no entry '{self.dims}'; known: {sorted(dims)}")
        own = decoders[self.decoder] if decoders and self.decoder in decoders else []  # none listed: none
        seed, *rate = (f"{key}={value:g}" for key, value in self.values().items())
        out = [f"decoder={self.decoder}", seed, *own, *dims[self.dims], *rate]
        if self.attention == BLIND:
            return out + ["attention=additive", "data.blind=true"]
        return out + [f"attention={self.attention}"]


def expand_grid(spec: dict) -> list[Cell]:
    """decoders x dims x (attentions + blind) x seeds, seed-major: a grid stopped half-way has
    whole seeds done, not whole modes; compare.dim_limits and decoder_limits keep some dims or
    decoders to fewer attentions, seeds or dims. With compare.lrs (a learning-rate sweep) every cell at
    each of those rates; otherwise at its rate from compare.rates (rate_for), if any."""
    modes = list(spec["attentions"]) + ([BLIND] if spec["blind"] else [])
    cells = [Cell(dec, dims, mode, seed) for seed in spec["seeds"] for dec in spec["decoders"]
             for dims in spec["dims"] for mode in modes if _within_limits(spec, dec, dims, mode, seed)]
    if spec["lrs"]:
        return [Cell(c.decoder, c.dims, c.attention, c.seed, float(lr)) for c in cells for lr in spec["lrs"]]
    rates = spec["rates"]
    return [Cell(c.decoder, c.dims, c.attention, c.seed, rate_for(rates, c)) for c in cells]


def _within_limits(spec: dict, decoder: str, dims: str, mode: str, seed: int) -> bool:
    """compare.dim_limits[dims] and compare.decoder_limits[decoder] ({attentions, seeds, dims}:
    only these) both allow the cell."""
    limits = [spec["dim_limits"][dims]] if dims in spec["dim_limits"] else []
    limits += [spec["decoder_limits"][decoder]] if decoder in spec["decoder_limits"] else []
    for limit in limits:  # schema.compare.Limit: a null list allows every value
        for key, value in (("attentions", mode), ("seeds", seed), ("dims", dims)):
            if limit[key] is not None and value not in limit[key]:
                return False
    return True


def rate_for(rates: dict[str, float], cell: Cell) -> float:
    """The learning rate compare.rates gives a cell: keys "decoder/dims/attention", any part may
    be *, the most specific key that matches wins (fewest *); a blind cell trains additive
    attention on zeroed features and takes additive's rate. 0.0: none matches (the base rate)."""
    mode = "additive" if cell.attention == BLIND else cell.attention
    best, rate = 4, 0.0
    for key, value in rates.items():
        parts = key.split("/")
        if len(parts) != 3:
            raise ValueError(f"compare.rates key '{key}': give decoder/dims/attention, e.g. "
                             "'lstm/*/additive' (* matches any)")
        if all(p in ("*", want) for p, want in zip(parts, (cell.decoder, cell.dims, mode))):
            stars = parts.count("*")
            if stars < best:
                best, rate = stars, float(value)
    return rate
