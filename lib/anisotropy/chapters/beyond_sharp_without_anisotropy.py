"""The ablation page (sharp attention without anisotropy): its per-variant numbers in words, and what it asks of a
runtime."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.pages import budget


def spread(by_variant: pd.DataFrame, variant: str, column: str, n_seeds: int, fmt: str = "{:.3f}") -> str:
    """'mean (min-max over seeds)' of a final-checkpoint statistic of ``by_variant`` (columns ``(column, mean|min|max)``),
    the mean alone with one seed, "— (zero means)" when it is NaN."""
    m, lo, hi = (by_variant.loc[variant, (column, s)] for s in ("mean", "min", "max"))
    if np.isnan(m):
        return "— (zero means)"
    return fmt.format(m) if n_seeds == 1 else f"{fmt.format(m)} ({fmt.format(lo)}–{fmt.format(hi)})"


def paper_runs() -> dict:
    """The `paper` profile's runs of this page in words, from its block of ``profiles/paper.yml``: ``shape``
    ("8-layer, 512-wide"), ``training`` ("sequence 128, batch 128, 20,000 updates"), ``corpus``, ``n_seeds``,
    ``n_variants``."""
    from anisotropy import profiles

    block = profiles.chapter_parameters("paper", "beyond_sharp_without_anisotropy")
    r = block.get("recipe", {})
    return {"shape": f"{r.get('depth')}-layer, {r.get('width')}-wide", "corpus": r.get("corpus", "its corpus"),
            "training": f"sequence {r.get('seq_len')}, batch {r.get('batch_size')}, {r.get('steps', 0):,} updates",
            "n_seeds": len(block.get("seeds", [])), "n_variants": len(block.get("variants", []))}


def plan(p: dict, out: budget.Plan) -> None:
    """One run of ``p["recipe"]`` per attention variant and seed (``experiments.ablation``), trained here."""
    out.train(p["recipe"], len(p["variants"]) * len(p["seeds"]))
