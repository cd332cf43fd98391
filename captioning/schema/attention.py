"""`attention=<mode>`: one schema per mode, its fields the mode's constructor keywords
(captioning/models/attention/) with the same defaults (tests/test_schema.py checks both). The
values each constructor accepts it checks itself; check_config builds the model on the meta
device, so a bad value is refused before any work. conf/attention/<mode>.yaml names the schema."""

from dataclasses import dataclass
from typing import Any

from .fields import at_least, setting

# The initialisations and projections the dot family offers (models/attention/dot.py).
# default | matched: the key projection starts as the query side's transpose (dot modes);
# default | orthogonal: orthogonal W1, W2 and zero bias (additive modes).


@dataclass
class Additive:
    """Bahdanau: v^T tanh(W1 q + W2 k); W2 k computed once per image."""

    name: str = "additive"
    attn_dim: int = setting(512, at_least(1))
    init: str = "default"           # or orthogonal


@dataclass
class Adaptive:
    """Lu et al. 2017: a visual sentinel from the LSTM's memory cell competes with the regions."""

    name: str = "adaptive"
    attn_dim: int = setting(512, at_least(1))


@dataclass
class Dot:
    """q^T W k: keys projected to the query's width once per image when the widths differ."""

    name: str = "dot"
    project: str = "auto"           # auto | keys | query | none (auto: keys when the widths differ)
    init: str = "default"           # or matched
    position_bias: str = "none"     # or relative_2d (a 2-D relative position bias)


@dataclass
class ScaledDot(Dot):
    """Dot attention divided by sqrt(width) (Vaswani et al.)."""

    name: str = "scaled_dot"


@dataclass
class SparseTopk(Dot):
    """Dot attention over each query's `topk` best-scoring cells only."""

    name: str = "sparse_topk"
    topk: int = setting(4, at_least(1))


@dataclass
class General:
    """Luong's general score q^T W k (W maps keys to the query's width)."""

    name: str = "general"
    scaled: bool = False
    init: str = "default"           # or matched
    position_bias: str = "none"     # or relative_2d


@dataclass
class GatedMixed:
    """A learned gate between an additive and a dot score."""

    name: str = "gated_mixed"
    attn_dim: int = setting(512, at_least(1))
    init: str = "default"           # or orthogonal (the additive part)


@dataclass
class Mixed:
    """Additive where the widths differ, `dot` where they are equal (decided at construction)."""

    name: str = "mixed"
    attn_dim: int = setting(512, at_least(1))
    dot: str = "dot"                # or scaled_dot
    init: str = "default"


@dataclass
class Hierarchical:
    """Attention over blocks of grid cells, then over the cells of the chosen blocks."""

    name: str = "hierarchical"
    attn_dim: int = setting(512, at_least(1))
    blocks: int = setting(2, at_least(1))


@dataclass
class Linear:
    """Kernelised (linear-time) attention: no per-cell softmax."""

    name: str = "linear"


@dataclass
class Local:
    """A Gaussian window over grid cells around a predicted centre."""

    name: str = "local"
    window: float = 2.0
    centre_dim: int = setting(128, at_least(1))


@dataclass
class MultiheadDot:
    """Scaled dot attention in `num_heads` heads."""

    name: str = "multihead_dot"
    num_heads: int = setting(8, at_least(1))
    head_dim: int | None = None     # value/output width per head; null = query_dim / num_heads


@dataclass
class MultiheadAdditive:
    """Additive attention in `num_heads` heads."""

    name: str = "multihead_additive"
    num_heads: int = setting(8, at_least(1))
    head_dim: int | None = None       # value/output width per head; null = query_dim / num_heads
    attn_dim: int = setting(512, at_least(1))
    head_attn_dim: int | None = None  # null = attn_dim / num_heads (single-head additive's total width)


@dataclass
class Aoa:
    """Attention on attention (Huang et al. 2019) around any other mode."""

    name: str = "aoa"
    base: str = "multihead_dot"     # any other mode
    base_args: dict[str, Any] = setting({"num_heads": 8})  # the base mode's own options (its schema)


@dataclass
class Graph:
    """A GAT layer over the grid cells once per image (neighbours: grid8 = the 8-neighbourhood,
    knn = the k most similar cells), added to the keys, then the base mode."""

    name: str = "graph"
    base: str = "additive"
    base_args: dict[str, Any] = setting({"attn_dim": 512})
    heads: int = setting(4, at_least(1))
    graph_dim: int = setting(64, at_least(1))   # per head
    adjacency: str = "grid8"        # or knn
    knn: int = setting(8, at_least(1))


ATTENTION = {s.name: s for s in (  # type: ignore[attr-defined]
    Additive, Adaptive, Dot, ScaledDot, SparseTopk, General, GatedMixed, Mixed, Hierarchical,
    Linear, Local, MultiheadDot, MultiheadAdditive, Aoa, Graph)}
