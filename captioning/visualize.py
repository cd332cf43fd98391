"""The classic attention figure: the image, then one panel per generated word with that step's
attention weights over the feature grid as a heat map."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def _figure(image: np.ndarray, words: list[str], weights: torch.Tensor, cols: int):
    """image (H, W, 3) uint8, words (L,), weights (L, N) with N a square grid -> Figure."""
    n = weights.shape[-1]
    side = math.isqrt(n)
    if side * side != n:
        raise ValueError(f"attention over {n} positions is not a square grid")
    panels = len(words) + 1
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols, 2.6 * rows), squeeze=False)
    h, w = image.shape[:2]
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k >= panels:
            continue
        ax.imshow(image)
        if k == 0:
            ax.set_title("input", fontsize=10)
            continue
        grid = weights[k - 1].float().view(side, side).cpu().numpy()
        ax.imshow(grid, cmap="jet", alpha=0.5, extent=(0, w, h, 0), interpolation="bilinear")
        ax.set_title(words[k - 1], fontsize=11)
    fig.tight_layout()
    return fig


def attention_figure(
    image: np.ndarray, words: list[str], weights: torch.Tensor, path: str | Path, cols: int = 5
) -> Path:
    """image (H, W, 3) uint8, words (L,), weights (L, N) with N a square grid -> PNG at path."""
    fig = _figure(image, words, weights, cols)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def attention_canvas(
    image: np.ndarray, words: list[str], weights: torch.Tensor, cols: int = 5
) -> np.ndarray:
    """The same figure as an (H, W, 3) uint8 array, for loggers (wandb, TensorBoard)."""
    fig = _figure(image, words, weights, cols)
    fig.set_dpi(60)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return rgb
