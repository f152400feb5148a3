"""The ablation page (sharp attention without anisotropy): its per-variant numbers in words, and what it asks of a
runtime."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy import profiles
from anisotropy.chapters import plans
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
    ("8-layer, 512-wide"), ``training`` ("sequence 128, batch 128, 10,000 updates"), ``corpus``, ``n_seeds``,
    ``n_variants``."""
    block = profiles.chapter_parameters("paper", "beyond_sharp_without_anisotropy")
    r = block.get("recipe", {})
    return {"shape": f"{r.get('depth')}-layer, {r.get('width')}-wide", "corpus": r.get("corpus", "its corpus"),
            "training": f"sequence {r.get('seq_len')}, batch {r.get('batch_size')}, {r.get('steps', 0):,} updates",
            "n_seeds": len(block.get("seeds", [])), "n_variants": len(block.get("variants", []))}


def paper_budget() -> str:
    """What the `paper` profile's runs of this page cost, in words, from its plan (``plan`` under ``paper``): the
    runs, the tokens each reads and how many passes over its corpus that is, one run's time on a T4 in its precision
    (its corpus's preparation included), and the whole page's over several sessions."""
    params = profiles.chapter_parameters("paper", "beyond_sharp_without_anisotropy")
    p = plans.plan("beyond_sharp_without_anisotropy", params, "paper")
    recipe = {"kind": "char-mlm", **params["recipe"]}
    tokens = recipe["steps"] * recipe["batch_size"] * recipe["seq_len"]
    passes = tokens / budget.corpus_tokens(recipe["corpus"], recipe["kind"])
    runs = [part for part in budget.parts(p) if part.kind == "train"]
    run = max(part.minutes[budget.FREE_GPU] for part in runs)
    over = "one pass" if 0.95 <= passes < 1.05 else f"{passes:.1f} passes"
    return (f"{len(runs)} runs of {tokens / 1e6:.0f}M tokens each (about {over} over its corpus), "
            f"each about {budget.minutes_text(run)} on a T4 in {budget.precision(recipe)} with its corpus's "
            f"preparation, and {budget.minutes_text(budget.estimate(p)['gpu_minutes'])} for the whole page with its "
            f"measurements, over several sessions")


def measuring_bytes(recipe: dict, n_texts: int, max_length: int) -> float:
    """Peak host bytes of measuring one checkpoint of the ablation (``experiments.ablation.checkpoint_statistics``,
    on the CPU): its float32 weights (4 P), every hidden state's vectors of the ``n_texts`` held-out texts (at most
    ``max_length`` tokens each) kept until the end and one state concatenated again (4 N d (depth + 2), N the
    tokens), the sigma_1 share's scatter (``budget.metric_bytes``) and one batch's eager attention (its scores,
    softmax and captured copy: 3 x 4 x 8 x heads x T^2, in batches of 8). Bytes."""
    width, depth, heads = recipe.get("width", 128), recipe.get("depth", 4), recipe.get("heads", 4)
    tokens = n_texts * max_length
    return (4 * budget.recipe_params(recipe) + 4.0 * tokens * width * (depth + 2) + budget.metric_bytes(tokens, width)
            + 96.0 * heads * max_length**2)


def plan(p: dict, out: budget.Plan) -> None:
    """One run of ``p["recipe"]`` per attention variant and seed (``experiments.ablation.recipes``: a byte-level
    encoder unless the recipe names its kind), trained here ``workers`` at a time (0: one per core of the profile's
    runtime); then every checkpoint of each run measured on the CPU (``registry.load``'s device) with ``threads``
    threads, ``workers`` processes at a time: two passes over ``n_texts`` texts of at most ``max_length`` tokens
    (the heads' statistics, then the hidden states), and a sigma_1 share per layer, each run's checkpoints one
    part."""
    recipe = {"kind": "char-mlm", **p["recipe"]}  # ablation.recipes' default kind
    runs = len(p["variants"]) * len(p["seeds"])
    rt = budget.runtime(out.profile)
    at_once = min(p.get("workers") or rt.cpus, runs)
    for v in p["variants"]:
        out.train({**recipe, "attention_variant": v}, len(p["seeds"]), names=[f"{v} seed {s}" for s in p["seeds"]],
                  at_once=at_once, group=f"train {v}", sized_by=("recipe.steps", "recipe.batch_size"))
    n_texts, length = p["n_texts"], p["max_length"]
    width, depth = recipe.get("width", 128), recipe.get("depth", 4)
    tokens = n_texts * length
    checkpoints = recipe.get("n_checkpoints", 10)
    # two passes of the encoder's body (its layers' maps, 12 d^2 a token and layer, and eager attention's two
    # products, 4 T d), the output layer left out
    forward = 2 * 2.0 * tokens * depth * (12 * width**2 + 2 * length * width)
    metric = (depth + 1) * sum(budget.metric_flops("sigma1_share", tokens, width))
    # each process runs ``threads`` threads (0 counts as 1) of the runtime's cores
    share = max(p.get("threads") or 1, 1) / rt.cpus
    for v in p["variants"]:
        for s in p["seeds"]:
            out.work.append(budget.Work(f"measure {v} seed {s}",
                                        host_bytes=min(at_once, runs) * measuring_bytes(recipe, n_texts, length),
                                        cpu_flops=checkpoints * (forward + metric) / share, on_cpu=True,
                                        sized_by=("n_texts", "max_length"), group=f"measure {v}"))
