"""The attention figure tells the truth: one colour scale for all panels (with its bar), a flat
map looks flat, object colours survive the overlay, the caption is the title."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from captioning.visualize import _figure, attention_canvas, attention_figure

SIDE, N = 4, 16


def scene() -> np.ndarray:
    """128 px grey image with a red square filling grid cell (0, 0) and a blue one in (3, 3)."""
    img = np.full((128, 128, 3), 128, np.uint8)
    img[4:28, 4:28] = (220, 30, 30)
    img[100:124, 100:124] = (30, 30, 220)
    return img


def peaked(cell: int, mass: float = 0.85) -> torch.Tensor:
    w = torch.full((N,), (1 - mass) / (N - 1))
    w[cell] = mass
    return w


def flat(noise: float = 0.0) -> torch.Tensor:
    w = torch.full((N,), 1 / N) + noise * torch.linspace(-1, 1, N)  # a barely tilted plane
    return w / w.sum()


def render(image, words, weights, scale="shared"):
    """-> (figure, RGB canvas (H, W, 3)), the canvas drawn from that figure."""
    fig = _figure(image, words, weights, cols=5, scale=scale)
    fig.canvas.draw()
    return fig, np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(np.float64)


def word_axes(fig):
    """The panels of the words, in order (not the input panel, not the colour bar)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and len(ax.images) == 2]


def pixels(fig, canvas, ax, x0, x1, y0, y1) -> np.ndarray:
    """The canvas pixels of an image-coordinate box of one panel: (k, 3)."""
    (dx0, dy0), (dx1, dy1) = ax.transData.transform([(x0, y0), (x1, y1)])
    height = canvas.shape[0]
    rows = slice(int(height - max(dy0, dy1)) + 1, int(height - min(dy0, dy1)) - 1)
    cols = slice(int(min(dx0, dx1)) + 1, int(max(dx0, dx1)) - 1)
    return canvas[rows, cols].reshape(-1, 3)


def test_one_colour_scale_for_every_panel_with_its_bar():
    weights = torch.stack([flat(), peaked(0), peaked(15, 0.5)])
    fig, _ = render(scene(), ["a", "red", "blue"], weights)
    panels = word_axes(fig)
    assert len(panels) == 3
    clims = {tuple(round(v, 6) for v in ax.images[1].get_clim()) for ax in panels}
    assert clims == {(0.0, 0.85)}, "every panel: weight 0 .. the figure's maximum"
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1 and "one scale" in bars[0].get_ylabel()
    assert fig._suptitle.get_text() == "a red blue"  # the whole caption
    # Per-panel scaling exists, differs, and says so where the reader looks.
    fig, _ = render(scene(), ["a", "red", "blue"], weights, scale="panel")
    assert len({ax.images[1].get_clim() for ax in word_axes(fig)}) == 3
    assert "own min .. max" in fig._suptitle.get_text()
    assert "not comparable" in [ax for ax in fig.axes if ax.get_label() == "<colorbar>"][0].get_ylabel()


def test_a_flat_map_looks_flat_next_to_a_peaked_one():
    """On a plain grey image the panels' pixel spread is the attention's contrast alone."""
    grey = np.full((128, 128, 3), 128, np.uint8)
    weights = torch.stack([flat(noise=0.01), peaked(5)])
    spread = {}
    for scale in ("shared", "panel"):
        fig, canvas = render(grey, ["flat", "peaked"], weights, scale)
        a, b = word_axes(fig)
        spread[scale] = [pixels(fig, canvas, ax, 0, 128, 0, 128).std() for ax in (a, b)]
    flat_std, peak_std = spread["shared"]
    assert flat_std < 0.1 * peak_std, spread
    # Why shared is the default: stretched to its own min .. max, the tilted plane looks as
    # contrasted as a real peak.
    assert spread["panel"][0] > 0.5 * spread["panel"][1], spread


def test_a_red_object_stays_red_in_the_overlay():
    """Colour words are under test: the overlay dims but never tints (a jet map turns red purple)."""
    fig, canvas = render(scene(), ["red", "blue"], torch.stack([peaked(0), peaked(15)]))
    attended, ignored = word_axes(fig)
    for ax in (attended, ignored):  # the red square's centre, attended to and not
        r, g, b = pixels(fig, canvas, ax, 10, 22, 10, 22).mean(0)
        assert r > 2 * g and r > 2 * b, (ax.get_title(), r, g, b)
    r_att = pixels(fig, canvas, attended, 10, 22, 10, 22).mean(0)[0]
    r_ign = pixels(fig, canvas, ignored, 10, 22, 10, 22).mean(0)[0]
    assert r_att > 200 and r_ign < 0.5 * r_att  # full colour where attended, dimmed elsewhere


def test_files_and_canvases(tmp_path):
    words, weights = ["a", "red", "square"], torch.stack([flat(), peaked(0), peaked(0)])
    path = attention_figure(scene(), words, weights, tmp_path / "sub" / "fig.png")
    assert path.is_file() and path.stat().st_size > 1000
    rgb = attention_canvas(scene(), words, weights, scale="panel")
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[-1] == 3
    with pytest.raises(ValueError, match="known: \\['shared', 'panel'\\]"):
        attention_canvas(scene(), words, weights, scale="jet")
    with pytest.raises(ValueError, match="square grid"):
        attention_canvas(scene(), words, torch.ones(3, 15) / 15)


def test_drawing_leaves_the_callers_matplotlib_as_it_was(tmp_path):
    """A notebook's inline backend survives `.figure()`: the figure is drawn outside pyplot, on its
    own canvas, and no pyplot figure is left open."""
    import matplotlib
    import matplotlib.pyplot as plt

    own = matplotlib.get_backend()
    plt.switch_backend("svg")  # a backend other than Agg stands in for the notebook's inline one
    try:
        opened = plt.get_fignums()
        words, weights = ["a", "red"], torch.stack([flat(), peaked(0)])
        attention_canvas(scene(), words, weights)
        attention_figure(scene(), words, weights, tmp_path / "fig.png")
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == opened
    finally:
        plt.switch_backend(own)
