"""The ablation "can attention be sharp without anisotropy?": matched small MLM encoders that differ only in their
attention variant (``models.attention_variants``), measured at every checkpoint along training.

Per checkpoint (variant, seed, step): the validation loss (nats per masked token, from the trainer); per layer and head
the mean attention entropy (nats, ``experiments.qk_dynamics.head_statistics``) and cos(Q̄, K̄) of the EFFECTIVE queries and keys;
per hidden layer (0 = embeddings) the mean cosine and sigma1_share of the token representations (padding excluded,
special tokens included). Everything goes through ``results.Store`` under ``CHAPTER``. A checkpoint is measured on the
device its run trained on (the recipe's ``device``: a GPU under ``paper``, where the statistics take the device path of
``measure.rows``), not on the CPU ``registry.load`` defaults to.
"""

from __future__ import annotations

import pandas as pd
import torch

from anisotropy.measure import statistics
from anisotropy.experiments import qk_dynamics
from anisotropy.models.session import session
from anisotropy import executor, results
from anisotropy.progress import say
from anisotropy.training import trainer, checkpoints
from anisotropy.training.recipes import Recipe, paragraph_batches

CHAPTER = "beyond_sharp_without_anisotropy"
ZERO_MEAN = 1e-5  # a mean query or key vector shorter than this is zero up to float32 rounding


def recipes(variants, seeds, **recipe) -> list[Recipe]:
    """One ``Recipe`` per (variant, seed), identical but for ``attention_variant``; suite ``ablation-<variant>``;
    ``kind`` defaults to ``char-mlm`` (masked bytes: context pays off within a few hundred updates)."""
    recipe = {"kind": "char-mlm", **recipe}
    return [Recipe(suite=f"ablation-{v}", attention_variant=v, seed=int(s), **recipe)
            for v in variants for s in seeds]


def held_out_texts(n: int, corpus: str = "prose") -> list[str]:
    """The first ``n`` validation paragraphs of the training corpus (never trained on), read a batch at a time: the
    validation split alone, never WikiText-103's 540 MB train split."""
    texts = []
    for batch in paragraph_batches(corpus, "validation"):
        texts += batch[:n - len(texts)]
        if len(texts) == n:
            break
    return texts


def checkpoint_statistics(folder, texts: list[str], max_length: int = 64, batch_size: int = 8,
                          device="cpu") -> pd.DataFrame:
    """Tidy rows for one checkpoint, loaded and measured on ``device`` (``devices.resolve``'s names): ``what`` =
    "head" (layer, head, entropy, entropy_uniform, cos_qk) or "hidden" (layer, mean_cosine, sigma1_share)."""
    per_layer: dict[int, list[torch.Tensor]] = {}
    with session(folder, batch_size=batch_size, device=device, attn_implementation="eager") as loaded, \
            torch.no_grad():
        where = next(loaded.model.parameters()).device
        body = qk_dynamics.model_body(loaded)
        heads = qk_dynamics.head_statistics(body, qk_dynamics.batches(loaded, texts, batch_size, max_length, where))
        for inputs, valid in qk_dynamics.batches(loaded, texts, batch_size, max_length, where):
            for layer, h in enumerate(body(**inputs, output_hidden_states=True).hidden_states):
                per_layer.setdefault(layer, []).append(h[valid])
        del body  # a name still holding the model would keep it past the session's end
    # cos(Q̄, K̄) of means that are zero up to rounding (the centred variant's) is noise: reported as NaN
    rows = [{"what": "head", "layer": int(r.layer), "head": int(r.head), "entropy": r.entropy,
             "entropy_uniform": r.entropy_uniform, "q_norm": r.q_norm, "k_norm": r.k_norm,
             "cos_qk": r.cos_qk if min(r.q_norm, r.k_norm) > ZERO_MEAN else float("nan")}
            for r in heads.itertuples()]
    for layer, parts in sorted(per_layer.items()):
        x = torch.cat(parts)
        rows.append({"what": "hidden", "layer": layer, "mean_cosine": statistics.mean_cosine(x),
                     "sigma1_share": statistics.sigma1_share(x)})
    return pd.DataFrame(rows)


def run(variants, seeds, recipe: dict, n_texts: int = 32, max_length: int = 64, threads: int | None = None,
        store: results.Store | None = None, progress: bool = True, workers: int | None = None
        ) -> dict[str, pd.DataFrame]:
    """Train (or reuse) every (variant, seed) run and measure every checkpoint. Returns tidy frames:
    ``loss`` (variant, seed, step, split, loss), ``heads`` (variant, seed, step, layer, head, entropy,
    entropy_uniform, cos_qk (NaN where a mean is zero), q_norm, k_norm), ``hidden`` (variant, seed, step, layer, mean_cosine, sigma1_share), ``runs``
    (``training.summary`` with the variant).

    The runs train in parallel worker processes and their checkpoints are measured in parallel too
    (``training.train_many``, ``executor.map``; ``workers`` defaults to the cores, 1 = one after another here):
    each run's weights are those of a serial run, bit for bit. ``threads`` (torch threads of the measurements; the
    training uses each recipe's own) defaults to 1 per process."""
    store = store or results.Store()
    runs = recipes(variants, seeds, **recipe)
    trainer.train_many(runs, workers=workers, progress=progress)
    return _run(runs, n_texts, max_length, threads or 1, store, workers)


def _measure_checkpoint(job: tuple) -> None:
    """Measure one checkpoint into the store (in a worker process of ``executor.map``)."""
    root, key, folder, texts, max_length, threads, device = job
    say(f"measuring {key['suite']} seed {key['seed']} at step {key['step']:,}")
    with trainer.torch_threads(threads):
        results.Store(root).cached(CHAPTER, key, lambda: checkpoint_statistics(folder, texts, max_length,
                                                                               device=device))


def _run(runs, n_texts, max_length, threads, store, workers) -> dict[str, pd.DataFrame]:
    texts = held_out_texts(n_texts, runs[0].corpus)
    jobs = []
    for r in runs:
        for ck in checkpoints.checkpoints(r):
            key = {"what": "ablation checkpoint statistics", "recipe": r.hash, "suite": r.suite, "seed": r.seed,
                   "step": ck.step, "n_texts": n_texts, "max_length": max_length, "version": 2}
            jobs.append((r, ck, key))
    missing = [(store.root, key, ck.path, texts, max_length, threads, r.device) for r, ck, key in jobs
               if not store.has(CHAPTER, key)]
    if missing:
        executor.map(_measure_checkpoint, missing, workers=min(workers or executor.cores(), len(missing)))
    frames = []
    for r, ck, key in jobs:
        frame = store.cached(CHAPTER, key, lambda ck=ck, r=r: checkpoint_statistics(ck.path, texts, max_length,
                                                                                     device=r.device))
        frames.append(frame.assign(variant=r.attention_variant, seed=r.seed, step=ck.step, val_loss=ck.loss))
    stats = pd.concat(frames, ignore_index=True)
    loss = trainer.loss_curves(runs)
    loss["variant"] = loss["suite"].str.removeprefix("ablation-")
    summary = trainer.summary(runs)
    summary["variant"] = summary["suite"].str.removeprefix("ablation-")
    keep_head = ["variant", "seed", "step", "val_loss", "layer", "head", "entropy", "entropy_uniform", "cos_qk",
                 "q_norm", "k_norm"]
    keep_hidden = ["variant", "seed", "step", "val_loss", "layer", "mean_cosine", "sigma1_share"]
    return {"loss": loss, "runs": summary,
            "heads": stats[stats.what == "head"][keep_head].astype({"head": int}).reset_index(drop=True),
            "hidden": stats[stats.what == "hidden"][keep_hidden].reset_index(drop=True)}


def final_summary(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (variant, seed) at the last step: validation loss, attention entropy (mean over layers and
    heads, nats), mean |cos(Q̄, K̄)| over heads, and hidden-state mean cosine / sigma1_share averaged over the
    transformer layers (1..L, embeddings excluded)."""
    heads, hidden = frames["heads"], frames["hidden"]
    last = heads.groupby(["variant", "seed"]).step.transform("max") == heads.step
    h = heads[last].assign(abs_cos_qk=lambda d: d.cos_qk.abs()).groupby(["variant", "seed"]).agg(
        val_loss=("val_loss", "first"), entropy=("entropy", "mean"), entropy_uniform=("entropy_uniform", "mean"),
        abs_cos_qk=("abs_cos_qk", "mean"))
    last = hidden.groupby(["variant", "seed"]).step.transform("max") == hidden.step
    z = hidden[last & (hidden.layer > 0)].groupby(["variant", "seed"])[["mean_cosine", "sigma1_share"]].mean()
    return h.join(z).reset_index()


__all__ = ["CHAPTER", "recipes", "held_out_texts", "checkpoint_statistics", "run", "final_summary"]
