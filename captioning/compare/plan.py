"""A grid's work order as data: which cells may start now, given the ones finished and the ones
already taken (running, failed or done in this process). A learning-rate sweep trains only the
rates its choices still need (sweep.choose), each mode's middle rate first; a grid that names
its sweep (compare.sweep.train) starts a mode's seeds as soon as the sweep has chosen its rate.
A cell a stopped run left with a checkpoint is resumed before any cell is started afresh: its
hours are not left standing while new cells begin (and its lr may be the one a choice awaits).
Serially (one cell at a time) and with compare.workers (a slot freed: the plan asked again) the
order is the same data, so both train the same cells."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from .cells import Cell, group_of, rate_for
from .grid import GridRunner
from .status import cell_state
from .sweep import sweep_report


def resumable_first(runner: GridRunner, cells: list[Cell]) -> list[Cell]:
    """`cells` in their order, but those interrupted (a checkpoint, nobody holding them) first."""
    def fresh(cell: Cell) -> bool:
        return cell_state(runner.directory(runner.resolve(cell)))["state"] != "interrupted"

    return sorted(cells, key=fresh)  # stable: the plan's order within each kind


class SweepPlan:
    """A sweep's cells (compare.lrs) in bracketed order: only the rates a choice still needs,
    each mode's rate nearest the middle of the range first, then the neighbours of its best so
    far; modes take turns, so that several workers (or processes) start on different modes."""

    def __init__(self, runner: GridRunner, cells: list[Cell], lrs: list[float]) -> None:
        self.runner, self.sweep, self.lrs = runner, cells, lrs
        self.groups = list(dict.fromkeys(c.group for c in cells))

    def report(self, done: dict[Cell, Path] | None = None) -> dict:
        """sweep_report of the sweep so far (`done`: its finished cells, where already found)."""
        done = self.runner.finished(self.sweep) if done is None else done
        return sweep_report(done, self.lrs, self.sweep)

    def rates(self) -> dict[str, float]:
        """The rates chosen so far ("decoder/dims/attention": lr), by validation only."""
        return self.report()["rates"]

    def cells(self) -> list[Cell]:
        return list(self.sweep)

    def seeds(self) -> dict[str, int]:
        """Each mode's held-out seeds per rate ("decoder/dims/attention": how many), in grid order."""
        return {g: len({c.seed for c in self.sweep if c.group == g}) for g in self.groups}

    def choices(self) -> list[dict]:
        """Each mode's row of the sweep so far (sweep_report): its chosen rate, or the rate
        leading and the rates still needed; a mode with no finished rate has no row."""
        return self.report()["rows"]

    def ready(self, taken: set[Cell]) -> list[Cell]:
        return resumable_first(self.runner, self._sweep_todo(taken))

    def _sweep_todo(self, taken: set[Cell]) -> list[Cell]:
        """The sweep's cells that may start now, in the plan's order (before resumable_first)."""
        done = self.runner.finished(self.sweep)
        rows = {group_of(r): r for r in self.report(done)["rows"]}
        todo = [c for c in self.sweep if c not in done and c not in taken
                and c.lr in (rows[c.group]["needed"] if c.group in rows else self.lrs)]
        middle = math.log(min(self.lrs) * max(self.lrs)) / 2

        def order(cell: Cell) -> tuple:
            leading = rows[cell.group]["leading"] if cell.group in rows else None
            centre = math.log(leading) if leading else middle
            turns = sum(1 for t in taken | set(done) if t.group == cell.group)
            return turns, self.groups.index(cell.group), abs(math.log(cell.lr) - centre), cell.lr, cell.seed

        return sorted(todo, key=order)


class SweepThenGrid(SweepPlan):
    """The sweep first, then each mode's grid cells (all its seeds) as soon as its rate is
    chosen; `grid(rates)` -> the grid's cells at those rates (a cell without one has lr 0).
    Rates given in compare.rates (`fixed`) win over the sweep's choice."""

    def __init__(self, runner: GridRunner, cells: list[Cell], lrs: list[float],
                 grid: Callable[[dict[str, float]], list[Cell]], fixed: dict[str, float]) -> None:
        super().__init__(runner, cells, lrs)
        self.grid, self.fixed = grid, fixed

    def rates(self) -> dict[str, float]:
        """The sweep's choices for the modes compare.rates gives no rate (not even by a * key),
        and compare.rates."""
        def fixed(group: str) -> bool:
            return bool(rate_for(self.fixed, Cell(*group.split("/"), seed=0)))

        return {**{g: lr for g, lr in super().rates().items() if not fixed(g)}, **self.fixed}

    def rated(self) -> list[Cell]:
        """The grid's cells whose mode has a rate by now."""
        return [c for c in self.grid(self.rates()) if c.lr]

    def cells(self) -> list[Cell]:
        return self.sweep + self.rated()

    def ready(self, taken: set[Cell]) -> list[Cell]:
        grid = self.rated()
        done = self.runner.finished(grid)
        return resumable_first(self.runner, self._sweep_todo(taken)
                               + [c for c in grid if c not in done and c not in taken])
