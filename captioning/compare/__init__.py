"""The controlled comparison: a grid of training runs (cells) keyed by config hash, and its
report with uncertainty."""

from .cells import Cell, expand_grid
from .grid import GridRunner
from .report import build_markdown, build_report
from .report_figures import save_plots

__all__ = [
    "Cell", "GridRunner", "build_markdown", "build_report", "expand_grid", "save_plots",
]
