import pytest
import torch

from captioning.metrics.grounding import attention_grounding, box_cells


def test_box_cells_cover_fractions():
    # 4x4 grid over a 128 px image: cells are 32 px. A box over cell (0, 0) and half of (0, 1).
    cells = box_cells([0, 0, 48, 32], 128, 4).view(4, 4)
    assert cells[0, 0] == 1 and cells[0, 1] == 0.5 and cells.sum() == 1.5
    assert box_cells([0, 0, 128, 128], 128, 4).eq(1).all()


def test_grounding_on_a_constructed_case():
    red = {"colour": "red", "shape": "circle", "bbox": [0, 0, 64, 64]}  # top-left quarter
    blue = {"colour": "blue", "shape": "circle", "bbox": [64, 64, 128, 128]}  # bottom-right
    n = 16  # 4x4 grid
    on_red = torch.zeros(n)
    on_red[[0, 1, 4, 5]] = 0.25  # all attention inside the red box
    uniform = torch.full((n,), 1 / n)
    captions = [["a", "red", "circle", "and", "a", "blue", "circle"]]
    # "red" -> red box (mass 1); "blue" -> blue box (mass 0: it still looks at red);
    # "circle" is carried by both objects: ambiguous, not counted; "a", "and" name nothing.
    weights = [torch.stack([uniform, on_red, on_red, uniform, uniform, on_red, uniform])]
    out = attention_grounding(captions, weights, [[red, blue]], 128, 4, "test/")
    assert out["test/grounding_words"] == 2
    assert out["test/grounding"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert out["test/grounding_uniform"] == pytest.approx(0.25)  # each box is a quarter
    assert out["test/grounding_ratio"] == pytest.approx(2.0)
    # Uniform attention gets exactly the uniform share.
    flat = attention_grounding(captions, [uniform.expand(7, n)], [[red, blue]], 128, 4)
    assert flat["grounding"] == pytest.approx(flat["grounding_uniform"])
    # No boxes (real datasets): nothing to report.
    assert attention_grounding(captions, weights, [[{"colour": "red"}]], 128, 4) == {}
