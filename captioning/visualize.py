"""The attention figure: the image, then one panel per generated word showing where that step's
attention weights (over the feature grid) fall.

Drawn so that it cannot mislead:
- **One colour scale for every panel** (`scale="shared"`, the default): weight 0 .. the largest
  weight in the figure, with a colour bar and the uniform weight 1/N marked on it. A flat map
  then *looks* flat next to a peaked one. `scale="panel"` stretches each panel to its own
  min .. max (the classic look, which makes every map look sharp) and says so on bar and title.
- **Object colours kept**: the image is not tinted by a colour map (a jet overlay turns a red
  square purple, exactly where colour words are tested); it is *dimmed* where attention is low
  and shown as it is where attention is high; the cells at >= half the scale's maximum are
  outlined in one hue that no built-in object has.
- **The whole caption as the title**, so the panels read as a sentence.
- **Weight off the grid is shown**: where a step's weights sum to less than 1 (adaptive
  attention's visual sentinel takes the rest), the panel gets its own "sentinel" tile with that
  weight, on the same scale.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import torch

from .models.attention.position import grid_side

SCALES = ("shared", "panel")  # media.attention_scale / caption.py attention_scale
DIM = 0.8  # opacity of the black shade at weight 0: low attention keeps 20 % of its brightness
CONTOUR = "#00e5ff"  # one hue that no built-in object colour uses


def _new_figure(figsize: tuple[float, float]):
    """A figure on its own Agg canvas, outside pyplot: drawing one never switches the backend of
    the caller's process (a notebook keeps showing its own figures) and leaves nothing open.
    matplotlib is imported only when a figure is drawn (the config check imports SCALES from here)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def _grids(weights: torch.Tensor) -> np.ndarray:
    """weights (L, N) with N a square grid -> (L, side, side) float64 array."""
    side = grid_side(weights.shape[-1], "an attention figure")
    return weights.detach().float().cpu().numpy().reshape(-1, side, side).astype(np.float64)


def _figure(image: np.ndarray, words: list[str], weights: torch.Tensor, cols: int,
            scale: str = "shared"):
    """image (H, W, 3) uint8, words (L,), weights (L, N) with N a square grid -> Figure."""
    if scale not in SCALES:
        raise ValueError(f"unknown attention figure scale '{scale}'; known: {list(SCALES)}")
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LinearSegmentedColormap, Normalize

    # Black with falling opacity: weight 0 -> dimmed, the scale's maximum -> the image as it is;
    # the colour bar shows the brightness that results.
    shade = LinearSegmentedColormap.from_list("shade", [(0, 0, 0, DIM), (0, 0, 0, 0)])
    brightness = LinearSegmentedColormap.from_list("brightness", [(1 - DIM,) * 3, (1, 1, 1)])
    grids = _grids(weights)  # (L, side, side)
    n = grids[0].size
    off_grid = 1.0 - grids.sum((1, 2))  # (L,) the sentinel's weight where there is one
    sentinel = bool((off_grid > 1e-3).any())
    top = float(grids.max()) if grids.size and grids.max() > 0 else 1.0
    panels = len(words) + 1
    cols = min(cols, panels)
    rows = math.ceil(panels / cols)
    fig = _new_figure((2.4 * cols + 0.9, 2.5 * rows + 0.5))
    axes = fig.subplots(rows, cols, squeeze=False)
    h, w = image.shape[:2]
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k >= panels:
            continue
        ax.imshow(image)
        if k == 0:
            ax.set_title("input", fontsize=10)
            continue
        grid = grids[k - 1]
        # shared: 0 .. the figure's maximum; panel: the panel's own min .. max (the classic look)
        vmin, vmax = (0.0, top) if scale == "shared" else (float(grid.min()), float(grid.max()))
        # nearest: each grid cell is one block of one weight, as the model sees it (a smooth
        # upsampling would invent a peak between cells)
        ax.imshow(grid, cmap=shade, norm=Normalize(vmin, vmax), extent=(0, w, h, 0),
                  interpolation="nearest")
        half = (vmin + vmax) / 2
        if grid.max() >= half > grid.min():  # outline the cells in the top half of the scale
            fine = np.kron(grid, np.ones((16, 16)))  # blocks, so the contour follows cell edges
            ys = (np.arange(fine.shape[0]) + 0.5) * h / fine.shape[0]
            xs = (np.arange(fine.shape[1]) + 0.5) * w / fine.shape[1]
            ax.contour(xs, ys, fine, levels=[half], colors=CONTOUR, linewidths=1.0)
        ax.set_xlim(0, w)
        ax.set_ylim(h, 0)
        ax.set_title(words[k - 1], fontsize=11)
        if sentinel:  # its own tile, top right, shaded on the panel's scale, value written
            tile = ax.inset_axes((0.68, 0.68, 0.3, 0.3))
            tile.imshow([[1.0]], cmap="gray", vmin=0, vmax=1)
            tile.imshow([[off_grid[k - 1]]], cmap=shade, norm=Normalize(vmin, vmax))
            tile.set_xticks([])
            tile.set_yticks([])
            for side in tile.spines.values():
                side.set_color(CONTOUR)
            tile.set_title(f"sentinel {off_grid[k - 1]:.2f}", fontsize=7, pad=1)
    caption = " ".join(words)
    how = "" if scale == "shared" else "  [each panel scaled to its own min .. max]"
    fig.suptitle("\n".join(textwrap.wrap(caption + how, 20 * cols)), fontsize=12)
    if scale == "shared":
        mappable = ScalarMappable(Normalize(0.0, top), brightness)
        label = "attention weight (one scale, all panels)"
    else:
        mappable = ScalarMappable(Normalize(0.0, 1.0), brightness)
        label = "each panel: its own min .. max\n(panels not comparable)"
    fig.tight_layout(rect=(0, 0, 1 - 0.9 / fig.get_figwidth(), 1))
    bar = fig.colorbar(mappable, ax=list(axes.flat), fraction=0.9 / fig.get_figwidth() / 2, pad=0.02)
    bar.set_label(label, fontsize=8)
    if scale == "shared" and 1 / n <= top:  # where a uniform map (attending to nothing) sits
        bar.ax.axhline(1 / n, color=CONTOUR, linewidth=1.5)
        bar.ax.text(1.05, 1 / n, " uniform", transform=bar.ax.get_yaxis_transform(),
                    fontsize=7, va="center", color="black")
    return fig


def attention_figure(
    image: np.ndarray, words: list[str], weights: torch.Tensor, path: str | Path, cols: int = 5,
    scale: str = "shared",
) -> Path:
    """image (H, W, 3) uint8, words (L,), weights (L, N) with N a square grid -> PNG at path."""
    fig = _figure(image, words, weights, cols, scale)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    return path


def attention_canvas(
    image: np.ndarray, words: list[str], weights: torch.Tensor, cols: int = 5, scale: str = "shared",
) -> np.ndarray:
    """The same figure as an (H, W, 3) uint8 array, for loggers (wandb, TensorBoard)."""
    fig = _figure(image, words, weights, cols, scale)
    fig.set_dpi(60)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
