"""What a claim's rule returns, the registry of rules, and the helpers they share.

A rule (``@rule``) is a function of the frame(s) a chapter computed and of a claim's ``params`` (``claims.yml``) that
returns an ``Outcome``: ``holds`` (True, False, or None when the frame cannot decide) and the value that decided it, in
words. The rules live in one module per part of the papers (``claims.rules.p1_s3``: Appendix B and Section 3,
``claims.rules.p1_s4``, ``claims.rules.p1_s5``, ``claims.rules.ablation``: the book's ablation of Paper 1's conclusion, ``claims.rules.p2``); the
ledger (``claims``) imports them all and looks a claim's rule up by name in ``RULES``. A rule that reads a trend or a
shape reads it through ``claims.curves`` (one way to read a curve) and names the shape in its docstring. Every rule is
tested on synthetic frames whose verdict is known (``tests/test_claims.py``), with a case where it must hold and one
where it must not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from anisotropy.claims import curves
# the curve after warm-up and the rank correlation live in ``claims.curves``; their names stay importable from here
from anisotropy.claims.curves import after_warmup, growth_start, spearman  # noqa: F401

#: The share of its gain a rise keeps at the end (``curves.rises``) where a rule is not given one.
MIN_KEPT = 0.5


@dataclass
class Outcome:
    """What a rule found: ``holds`` (None: the frame cannot decide it) and the value that decided it, in words."""

    holds: bool | None
    value: str


RULES: dict[str, Callable] = {}


def rule(function: Callable) -> Callable:
    """Register ``function`` in ``RULES`` under its name (the name a claim's ``rule`` gives)."""
    RULES[function.__name__] = function
    return function


def per_model(frame: pd.DataFrame, by: str = "label") -> list[tuple[str, pd.DataFrame]]:
    """(name, rows) per model (column ``by``, else ``model``), each model's rows in layer order."""
    key = by if by in frame.columns else "model"
    return [(str(name), part.sort_values("layer") if "layer" in part else part)
            for name, part in frame.groupby(key, sort=False)]


def majority(flags: list[bool]) -> bool:
    """More than half of ``flags`` are true."""
    return sum(flags) > len(flags) / 2


def too_few(what: str, n: int, needed: int, detail: str = "") -> Outcome:
    """The outcome of a rule whose sample is below its minimum: undecided, saying how many it had and needed."""
    return Outcome(None, f"too few {what}: {n} (at least {needed} needed)" + (f"; {detail}" if detail else ""))


# ---- checkpoint series (columns run, step[, warmup]): rules that follow runs along training --------------------

def each_run(qk: pd.DataFrame):
    """(run, rows) per run of a checkpoint-series frame, in the frame's order."""
    return [(run, part) for run, part in qk.groupby("run", sort=False)]


def run_ends(part: pd.DataFrame):
    """One run's rows at its first and at its last checkpoint."""
    return part[part["step"] == part["step"].min()], part[part["step"] == part["step"].max()]


def trend(steps, values) -> float:
    """Spearman's rho of ``values`` against ``steps`` (``curves.spearman``: NaN with fewer than 3 points; two
    checkpoints make no trend)."""
    return spearman(steps, values)


def rises(steps, values, min_rho: float, min_kept: float = MIN_KEPT) -> bool | None:
    """The series rises over its whole course (``curves.rises``: rho at least ``min_rho`` with its interval clear of
    0, and at least ``min_kept`` of the gain kept at the end); None where it cannot tell."""
    return curves.rises(curves.Curve(np.asarray(steps, float), np.asarray(values, float)), min_rho, min_kept)[0]


def over_runs(frame: pd.DataFrame, test: Callable[[pd.DataFrame], tuple[bool | None, str]], min_runs: int = 2,
              from_warmup: bool = False, min_checkpoints: int = 2, from_growth_start: bool = False) -> Outcome:
    """A per-run ``test`` (None: the run cannot answer) that holds in most runs, decided on at least ``min_runs``
    runs with ``min_checkpoints`` checkpoints each (from the end of the warm-up with ``from_warmup``): "most runs"
    of one run is that run's seed."""
    found = []
    for run, part in each_run(frame):
        part = after_warmup(part) if from_warmup else growth_start(part) if from_growth_start else part
        steps = part["step"].nunique()
        if steps < min_checkpoints:
            where = "after its warm-up" if from_warmup else ""
            found.append((run, None, f"{steps} checkpoint(s) {where} (at least {min_checkpoints} needed)"))
            continue
        found.append((run, *test(part)))
    if not found:
        return Outcome(None, "no run")
    decided = [ok for _, ok, _ in found if ok is not None]
    words = "; ".join(f"{run}: {text}" for run, _, text in found)
    if len(decided) < min_runs:
        return too_few("runs that can answer", len(decided), min_runs, words)
    return Outcome(majority(decided), f"{sum(decided)} of {len(decided)} runs: {words}")
