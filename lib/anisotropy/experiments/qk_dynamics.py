"""Queries and keys along training (Paper 1, Section 5): per-head means of queries and keys, their alignment, and the
sharpness of attention, measured checkpoint by checkpoint.

For a checkpoint at training step ``s``, a layer and a head, ``Q_s`` and ``K_s`` are the query and key vectors of every
non-padding token of a fixed set of inputs, and ``Q̄_s``, ``K̄_s`` their means over tokens. Per step and head we keep
``cos(Q̄_s, K̄_s)``, ``Q̄_s · K̄_s``, the norms of both means and the mean entropy of the attention rows (nats), beside
the mean vectors themselves.

Streaming: ``step_statistics`` and ``step_vectors`` load one checkpoint at a time and store its rows in the results
store under a key naming that checkpoint, so an interrupted run resumes at the first checkpoint not yet stored and a
second run reads everything back without loading a model.

Projections (Figure 11, Appendix C): the top two right singular vectors of the vectors of all steps stacked (queries
and keys, or keys only, or queries only), without centring, so that the origin stays the origin and a drift of the
means away from it is visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from anisotropy.measure import attention, baseline, metrics
from anisotropy.data import sources
from anisotropy.models import registry
from anisotropy.models.identity import identity
from anisotropy.models.session import session
from anisotropy import devices, executor, hub, results
from anisotropy.experiments.layerwise import Skipped
from anisotropy.progress import say
from anisotropy.training import recipes, trainer

CHAPTER = "p1_s5_qk_training"
# What stops a checkpoint, not the chapter: it could not be downloaded, or does not fit the device.
SKIPPABLE = (hub.Unavailable, registry.ModelTooLargeError)
KINDS = ("query", "key")


# ---- checkpoints along training -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One checkpoint of a training run: ``run`` names the run (e.g. "MultiBERTs seed 0"), ``step`` is its training
    step, ``source`` a registry name or a ``save_pretrained`` folder, ``revision`` the hub revision if any."""

    run: str
    seed: int
    step: int
    source: str
    revision: str | None = None
    variant: str = "pretrained"

    @property
    def name(self) -> str:
        """The registry name (or folder) of the run's weights: the model a claim names (``claims.ledger``)."""
        return self.source

    @property
    def key(self) -> dict:
        """What identifies the weights in a stored result's key: ``{"model": models.identity.identity(...)}``."""
        return {"model": identity(self.source, self.variant, self.revision)}

    def load(self, device="cpu", release: bool = False) -> registry.Loaded:
        """The checkpoint in memory; ``release``: a hub checkpoint's downloaded files leave the cache once loaded."""
        return registry.load(self.source, variant=self.variant, revision=self.revision, device=device,
                             attn_implementation="eager", release=release and self.revision is not None)


def describe(stages: list[Stage], kind: str) -> str:
    """One line for the provenance box: the run, where its checkpoints come from (hub id and revisions, or folders)
    and the steps they span."""
    steps = [s.step for s in stages]
    if stages[0].revision:
        first, last = (registry.spec(stages[0].source).hub_location(s.revision)[0] for s in (stages[0], stages[-1]))
        where = (f"{len(stages)} checkpoints, {first} … {last}" if first != last else
                 f"{first} at {len(stages)} revisions {stages[0].revision} … {stages[-1].revision}")
    else:
        where = f"{len(stages)} checkpoints"
    return f"{stages[0].run}: {where}, steps {steps[0]:,} to {steps[-1]:,} ({kind})"


def multiberts_stages(seed: int = 0, revisions=None) -> list[Stage]:
    """MultiBERTs seed ``seed`` at every intermediate checkpoint of the registry (or the given revisions)."""
    name = f"multiberts-seed-{seed}"
    revisions = revisions or registry.spec(name).revisions
    return [Stage(f"MultiBERTs seed {seed}", seed, hub.step(r, required=True), name, r) for r in revisions]


def suite_stages(suite: str, profile: str, seeds=None, progress: bool = False) -> dict[int, list[Stage]]:
    """``{seed: [Stage, ...]}`` of a self-trained suite of ``training`` (trained first if not in the cache)."""
    suite_recipes = [r for r in recipes.suite(suite, profile) if seeds is None or r.seed in seeds]
    out = {}
    for recipe in suite_recipes:
        checkpoints = trainer.train(recipe, progress=progress)
        out[recipe.seed] = [Stage(f"{suite} seed {recipe.seed}", recipe.seed, c.step, str(c.path)) for c in checkpoints]
    return out


def folder_stages(folder: str | Path, seeds=None, name: str | None = None) -> dict[int, list[Stage]]:
    """``{seed: [Stage, ...]}`` of a folder of checkpoints laid out as ``training`` writes them:
    ``<folder>/seed-<k>/step-<n>/`` (or ``<folder>/step-<n>/`` for a single run, seed 0)."""
    folder = Path(folder)
    name = name or folder.name
    runs = {int(p.name.split("-", 1)[1]): p for p in folder.glob("seed-*") if p.name.split("-", 1)[1].isdigit()}
    if not runs and any(folder.glob("step-*")):
        runs = {0: folder}
    out = {}
    for seed, run in sorted(runs.items()):
        if seeds is not None and seed not in seeds:
            continue
        steps = sorted((int(p.name.split("-", 1)[1]), p) for p in run.glob("step-*")
                       if p.name.split("-", 1)[1].isdigit() and (p / "config.json").is_file())
        out[seed] = [Stage(f"{name} seed {seed}", seed, step, str(p)) for step, p in steps]
    if not out:
        raise FileNotFoundError(f"{folder}: no seed-<k>/step-<n> or step-<n> checkpoint folders")
    return out


def runs(source: str, profile: str = "local", seeds=None, revisions=None, progress: bool = False
         ) -> dict[int, list[Stage]]:
    """``{seed: [Stage, ...]}`` for a source named in a profile: ``"multiberts"`` (the hub checkpoints, all the
    registry's revisions unless ``revisions`` is given), a folder of checkpoints (``folder_stages``), or the name of
    a self-trained suite of the profile (``suite_stages``)."""
    if source == "multiberts":
        return {s: multiberts_stages(s, revisions or None) for s in (seeds if seeds is not None else [0])}
    if Path(source).is_dir():
        return folder_stages(source, seeds)
    return suite_stages(source, profile, seeds, progress=progress)


def twin_stages(name: str) -> list[Stage]:
    """A pretrained model of the registry as a two-stage "run": its untrained twin (the same architecture, random
    weights, the registry's offline tokenizer) at step 0 and its released weights at step 1. For models without
    intermediate checkpoints (the real decoders offline) this is the only before and after there is; the first
    stage is an initialisation, not the paper's first checkpoint after warm-up."""
    run = f"{registry.spec(name).display}: untrained twin, then pretrained"
    return [Stage(run, 0, 0, name, variant="untrained"), Stage(run, 0, 1, name, variant="pretrained")]


def modality(stage: Stage) -> str:
    """"text" or "vision": what the stage's model reads (registry entry, or the folder's config)."""
    if not Path(stage.source).is_dir():
        return registry.spec(stage.source).modality
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(stage.source)
    return "vision" if hasattr(config, "image_size") or hasattr(config, "num_channels") else "text"


def pick_stages(stages: list[Stage], n: int) -> list[Stage]:
    """``n`` stages spread over the run: the first, the last, and the others evenly in log(1 + step)."""
    if n >= len(stages):
        return list(stages)
    steps = np.log1p([s.step for s in stages])
    targets = np.linspace(steps[0], steps[-1], n)
    chosen = sorted({int(np.abs(steps - t).argmin()) for t in targets})
    return [stages[i] for i in chosen]


# ---- inputs -------------------------------------------------------------------------------------------------------

def examples(dataset: str, n: int, seed: int = 0, image_size: int = 32):
    """The ``n`` raw inputs every checkpoint sees: ``data.load(dataset, n, seed)``, images drawn at the model's
    ``image_size`` (offline: ``"prose"``, ``"synthetic-shapes"``; paper: ``"wikitext-103"``)."""
    options = {"size": image_size} if sources.modality(dataset) == "vision" else {}
    return sources.load(dataset, n, seed, **options)


def batches(loaded: registry.Loaded, inputs, batch_size: int = 8, max_length: int = 128, device="cpu"):
    """Yield ``(model inputs, valid)`` per batch; ``valid`` (batch, seq) marks real tokens (``None`` for images:
    every patch counts). Texts are cut at ``max_length`` tokens, or at the model's own limit if shorter, and batched
    in order of length (a fixed order for given inputs and tokenizer) so that little compute goes to padding."""
    pre = loaded.preprocessor
    if not isinstance(inputs[0], str):
        for i in range(0, len(inputs), batch_size):
            pixels = pre(images=list(inputs[i: i + batch_size]), return_tensors="pt")["pixel_values"]
            yield {"pixel_values": pixels.to(device)}, None
        return
    config = loaded.model.config
    # a model trained on shorter windows has no position embeddings beyond them
    limits = [getattr(config, "max_position_embeddings", None), getattr(config, "n_positions", None),
              getattr(pre, "model_max_length", None)]
    max_length = min([max_length, *(int(v) for v in limits if v and v < 10**6)])
    lengths = [len(ids) for ids in pre(list(inputs), truncation=True, max_length=max_length)["input_ids"]]
    order = sorted(range(len(inputs)), key=lambda i: (lengths[i], i))
    names = getattr(pre, "model_input_names", None)
    for i in range(0, len(order), batch_size):
        part = [inputs[j] for j in order[i: i + batch_size]]
        enc = pre(part, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        enc = {k: v.to(device) for k, v in enc.items() if names is None or k in names}
        yield enc, enc["attention_mask"].bool()


def _examples_key(dataset: str, n: int, seed: int, max_length: int) -> dict:
    return {"dataset": dataset, "n_samples": n, "sample_seed": seed, "max_length": max_length}


# ---- per-step statistics --------------------------------------------------------------------------------------------

def _row_entropy(probs: torch.Tensor) -> torch.Tensor:
    """-sum_j p_ij log p_ij per attention row (nats); masked keys have p = 0 and contribute 0."""
    p = probs.float()
    return -(p * torch.log(p.clamp_min(1e-30))).sum(-1).double()


def head_statistics(model, batch_iter, layers=None) -> pd.DataFrame:
    """One row per (layer, head): the means ``q_mean`` = Q̄, ``k_mean`` = K̄ over all valid tokens (vectors),
    ``cos_qk`` = cos(Q̄, K̄), ``dot_qk`` = Q̄·K̄, ``q_norm``, ``k_norm``, ``entropy`` (mean over valid query rows of
    the entropy of the attention row, nats), ``entropy_uniform`` (the same for uniform attention over the allowed
    keys: the ceiling), ``q_cosine`` and ``k_cosine`` (the mean cosine of two distinct queries, or keys, of the head:
    the drift anisotropy of Section 5's last paragraph, from the sum of the unit vectors), ``n_tokens``."""
    sums: dict[int, dict] = {}
    for inputs, valid in batch_iter:
        caps = attention.capture(model, inputs, layers=layers)
        for layer, cap in caps.items():
            b, h, s, d = cap.queries.shape
            v = torch.ones(b, s, dtype=torch.bool, device=cap.queries.device) if valid is None else valid
            w = v[:, None, :, None].double()
            allowed = torch.cumsum(v.double(), -1) if cap.causal else v.double().sum(-1, keepdim=True).expand(b, s)
            acc = sums.setdefault(layer, {"q": 0.0, "k": 0.0, "n": 0, "ent": 0.0, "uni": 0.0, "d": d, "h": h})
            acc["q"] = acc["q"] + (cap.queries.double() * w).sum((0, 2))
            acc["k"] = acc["k"] + (cap.keys.double() * w).sum((0, 2))
            acc["qu"] = acc.get("qu", 0.0) + (_unit(cap.queries) * w).sum((0, 2))
            acc["ku"] = acc.get("ku", 0.0) + (_unit(cap.keys) * w).sum((0, 2))
            acc["n"] += int(v.sum())
            # where(), not a product: a padding row may hold NaN (all its keys masked) and NaN * 0 is NaN
            acc["ent"] = acc["ent"] + torch.where(v[:, None, :], _row_entropy(cap.probs), 0.0).sum((0, 2))
            acc["uni"] += float((torch.log(allowed.clamp_min(1)) * v).sum())
    rows = []
    for layer, acc in sorted(sums.items()):
        q_mean = (acc["q"] / acc["n"]).cpu().numpy()
        k_mean = (acc["k"] / acc["n"]).cpu().numpy()
        entropy = (acc["ent"] / acc["n"]).cpu().numpy()
        q_unit, k_unit = acc["qu"].cpu().numpy(), acc["ku"].cpu().numpy()
        for head in range(acc["h"]):
            q, k = q_mean[head], k_mean[head]
            qn, kn = float(np.linalg.norm(q)), float(np.linalg.norm(k))
            rows.append({"layer": layer, "head": head, "head_dim": acc["d"], "n_tokens": acc["n"],
                         "cos_qk": float(q @ k / (qn * kn)) if qn > 0 and kn > 0 else 0.0, "dot_qk": float(q @ k),
                         "q_norm": qn, "k_norm": kn, "entropy": float(entropy[head]),
                         "entropy_uniform": acc["uni"] / acc["n"],
                         "q_cosine": metrics.mean_cosine_from_sums(q_unit[head], acc["n"]),
                         "k_cosine": metrics.mean_cosine_from_sums(k_unit[head], acc["n"]),
                         "q_mean": q.astype(np.float32), "k_mean": k.astype(np.float32)})
    return pd.DataFrame(rows)


def _unit(x: torch.Tensor) -> torch.Tensor:
    """``x`` (..., d) scaled to unit norm along its last axis, in float64 (a zero vector stays zero)."""
    x = x.double()
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)


def step_statistics(stages: list[Stage], dataset: str = "prose", n_samples: int = 32, sample_seed: int = 0,
                    max_length: int = 128, batch_size: int = 8, layers=None, device: str = "cpu",
                    store: results.Store | None = None, chapter: str = CHAPTER, progress: bool = True,
                    release: bool = True, fan_out: str = "none") -> pd.DataFrame:
    """``head_statistics`` of every stage, one checkpoint in memory at a time, each stored under its own key (resume:
    stored stages are read back, not recomputed). Adds columns run, seed, step. ``release``: downloaded hub
    checkpoints leave the cache once measured (``models.registry.load``); pass False for a run measured again later.
    ``fan_out``: the stages are measured through ``executor.map`` ("none": one after another here; "auto" or a
    scheduler address: in parallel, see ``executor.fan_out``)."""
    layers = sorted(layers) if layers else None
    return _per_stage(stages, {"what": "qk step statistics"}, {"layers": layers},
                      lambda body, batch_iter: head_statistics(body, batch_iter, layers),
                      dataset, n_samples, sample_seed, max_length, batch_size, device, store, chapter,
                      progress and "checkpoints", release, fan_out)


def _per_stage(stages: list[Stage], what: dict, extra_key: dict, measure, dataset: str, n_samples: int,
               sample_seed: int, max_length: int, batch_size: int, device: str, store: results.Store | None,
               chapter: str, progress, release: bool = True, fan_out: str = "none") -> pd.DataFrame:
    """``measure(model body, batches)`` of every stage on the same examples, one checkpoint in memory at a time (per
    worker, with ``fan_out``), each stored under ``what`` + the stage + the examples + ``extra_key``; ``progress``
    is the bar's label or False."""
    store = store or results.Store()
    device = devices.resolve(device)
    inputs = {}  # image size -> examples (the same for every stage; built once per process)

    def key(stage: Stage) -> dict:
        return {**what, **stage.key, **_examples_key(dataset, n_samples, sample_seed, max_length), **extra_key}

    def computation(stage: Stage) -> Callable[[], pd.DataFrame]:
        def compute():
            say(f"{stage.run}: checkpoint at step {stage.step:,} ({what.get('what', 'measured')})")
            with session(stage.source, batch_size=batch_size,
                         load=lambda: stage.load(device, release=release)) as loaded:
                size = _image_size(loaded)
                if size not in inputs:
                    inputs[size] = examples(dataset, n_samples, sample_seed, size)
                with torch.no_grad():
                    return measure(model_body(loaded), batches(loaded, inputs[size], batch_size, max_length, device))

        return compute

    def one(stage: Stage) -> pd.DataFrame:
        frame = store.cached(chapter, key(stage), computation(stage))
        return frame.assign(run=stage.run, seed=stage.seed, step=stage.step)

    from tqdm import tqdm

    with tqdm(total=len(stages), desc=progress or "", disable=not progress, leave=False) as bar:
        stored = lambda stage: store.stored(chapter, key(stage), computation(stage))  # noqa: E731
        outcomes = executor.map(one, stages, retries=1, on_done=lambda *_: bar.update(1), ready=stored,
                                errors="return", **executor.fan_out(fan_out))
    return _skipping_unavailable(stages, outcomes)


def _skipping_unavailable(stages: list[Stage], outcomes: list) -> pd.DataFrame:
    """The measured stages' rows, concatenated; a checkpoint that could not be had (a failed download out of a
    run's hundreds, a model too large for the device) is left out, named in one line and listed in the frame's
    ``attrs["skipped"]`` (``skipped``). Offline, or with nothing measured, it stops; any other error is raised."""
    frames, skipped = [], []
    for stage, outcome in zip(stages, outcomes):
        if isinstance(outcome, hub.Offline) or (isinstance(outcome, BaseException)
                                                and not isinstance(outcome, SKIPPABLE)):
            raise outcome
        if isinstance(outcome, BaseException):
            why = str(outcome).splitlines()[0]
            say(f"{stage.run}: skipped the checkpoint at step {stage.step:,}: {why}")
            skipped.append(Skipped(stage, f"its checkpoint at step {stage.step:,} could not be had here ({why})"))
        else:
            frames.append(outcome)
    if not frames:
        raise hub.Unavailable(f"none of the {len(stages)} checkpoints of {stages[0].run} could be measured here; "
                              f"the first: {skipped[0].reason}")
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs["skipped"] = skipped
    return frame


def skipped(*frames: pd.DataFrame) -> list:
    """The checkpoints ``step_statistics`` / ``step_vectors`` left out of ``frames`` (``layerwise.Skipped`` rows, one
    per checkpoint), for ``claims.ledger.evaluate``: a claim about that run is then not decided on part of it."""
    return [s for f in frames for s in f.attrs.get("skipped", [])]


def model_body(loaded: registry.Loaded):
    """The model without its task head (BertForMaskedLM -> BertModel, ...): the head does not change queries, keys
    or attention, and the language-modelling head over the vocabulary costs as much as a layer."""
    return getattr(loaded.model, "base_model", loaded.model)


def _image_size(loaded: registry.Loaded) -> int:
    return int(getattr(loaded.model.config, "image_size", 32) or 32)


# ---- vector samples for the projections -------------------------------------------------------------------------

def head_vectors(model, batch_iter, heads, fraction: float = 0.2, max_vectors: int = 2000, seed: int = 0
                 ) -> pd.DataFrame:
    """Queries and keys of the given ``(layer, head)`` pairs for a random ``fraction`` of the valid tokens (at most
    ``max_vectors``). The tokens are drawn by ``seed`` among the valid tokens enumerated in input order, so every
    checkpoint fed the same inputs gets the same tokens. Columns: layer, head, kind ("query"/"key"), token,
    vector."""
    heads = sorted({(int(layer), int(h)) for layer, h in heads})
    layers = sorted({layer for layer, _ in heads})
    kept: dict[tuple[int, int, str], list] = {}
    for inputs, valid in batch_iter:
        caps = attention.capture(model, inputs, layers=layers, keep_probs=False)
        for layer, head in heads:
            cap = caps[layer]
            b, _, s, _ = cap.queries.shape
            v = torch.ones(b, s, dtype=torch.bool, device=cap.queries.device) if valid is None else valid
            for kind, x in zip(KINDS, (cap.queries, cap.keys)):
                kept.setdefault((layer, head, kind), []).append(x[:, head][v].float().cpu().numpy())
    rows = []
    for (layer, head, kind), parts in kept.items():
        x = np.concatenate(parts)
        n = min(max_vectors, max(1, int(round(fraction * len(x)))), len(x))
        tokens = np.sort(np.random.default_rng(seed).choice(len(x), size=n, replace=False))
        rows.append(pd.DataFrame({"layer": layer, "head": head, "kind": kind, "token": tokens,
                                  "vector": list(x[tokens])}))
    return pd.concat(rows, ignore_index=True)


def step_vectors(stages: list[Stage], heads, dataset: str = "prose", n_samples: int = 32, sample_seed: int = 0,
                 max_length: int = 128, batch_size: int = 8, fraction: float = 0.2, max_vectors: int = 2000,
                 device: str = "cpu", store: results.Store | None = None, chapter: str = CHAPTER,
                 progress: bool = True, fan_out: str = "none") -> pd.DataFrame:
    """``head_vectors`` of every stage, streamed and stored per stage like ``step_statistics``."""
    heads = sorted({(int(layer), int(h)) for layer, h in heads})
    return _per_stage(stages, {"what": "qk vector sample"},
                      {"heads": [list(h) for h in heads], "fraction": fraction, "max_vectors": max_vectors},
                      lambda body, batch_iter: head_vectors(body, batch_iter, heads, fraction, max_vectors,
                                                            seed=sample_seed),
                      dataset, n_samples, sample_seed, max_length, batch_size, device, store, chapter,
                      progress and "checkpoints (vectors)", True, fan_out)


# ---- SVD projections ---------------------------------------------------------------------------------------------

def svd_basis(x: np.ndarray, n_components: int = 2) -> np.ndarray:
    """(dim, n_components): the top right singular vectors of ``x`` (rows = vectors), not centred; each axis is
    oriented so that the mean of ``x`` projects non-negatively on it."""
    x = np.asarray(x, dtype=np.float64)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    basis = vt[:n_components].T.copy()
    signs = np.sign(x.mean(0) @ basis)
    basis *= np.where(signs == 0, 1.0, signs)
    return basis


def _stack(frame: pd.DataFrame) -> np.ndarray:
    return np.stack(frame["vector"].to_numpy()).astype(np.float64)


def projection_basis(vectors: pd.DataFrame, layer: int, head: int, fit_on: str = "union", fraction: float = 1.0,
                     seed: int = 0) -> np.ndarray:
    """SVD basis of one head's vectors of every step: ``fit_on`` "union" (queries and keys, the paper's Figure 11),
    "keys" (Figures 19, 21) or "queries" (Figures 20, 22); ``fraction`` subsamples the stacked rows."""
    part = vectors[(vectors["layer"] == layer) & (vectors["head"] == head)]
    if fit_on != "union":
        part = part[part["kind"] == {"keys": "key", "queries": "query"}[fit_on]]
    x = _stack(part)
    if fraction < 1.0:
        rng = np.random.default_rng(seed)
        x = x[rng.choice(len(x), size=max(2, int(round(fraction * len(x)))), replace=False)]
    return svd_basis(x)


def project_vectors(vectors: pd.DataFrame, layer: int, head: int, basis: np.ndarray) -> pd.DataFrame:
    """Tidy frame step, kind, token, x, y: one head's sampled queries and keys in the plane of ``basis``."""
    part = vectors[(vectors["layer"] == layer) & (vectors["head"] == head)]
    xy = _stack(part) @ basis
    return pd.DataFrame({"step": part["step"].to_numpy(), "kind": part["kind"].to_numpy(),
                         "token": part["token"].to_numpy(), "x": xy[:, 0], "y": xy[:, 1]})


def project_means(stats: pd.DataFrame, layer: int, head: int, basis: np.ndarray) -> pd.DataFrame:
    """Tidy frame step, kind, x, y: the trajectories of Q̄_s and K̄_s of one head in the plane of ``basis``."""
    part = stats[(stats["layer"] == layer) & (stats["head"] == head)].sort_values("step")
    rows = []
    for kind, col in zip(KINDS, ("q_mean", "k_mean")):
        xy = np.stack(part[col].to_numpy()).astype(np.float64) @ basis
        rows.append(pd.DataFrame({"step": part["step"].to_numpy(), "kind": kind, "x": xy[:, 0], "y": xy[:, 1]}))
    return pd.concat(rows, ignore_index=True)


def drift_in_basis(vectors: pd.DataFrame, stats: pd.DataFrame, heads, fits=("union", "keys", "queries")
                   ) -> pd.DataFrame:
    """Section 5 and Appendix C, read as numbers: per head of ``heads`` ((layer, head) pairs with sampled vectors)
    and per SVD basis of ``fits`` (``projection_basis``' ``fit_on``), the first singular axis v1 against the drift of
    each mean from the first to the last step: ``q_axis_cos`` = cos(v1, Q̄_last - Q̄_first) and ``k_axis_cos`` likewise
    (its square: the share of the displacement's squared length along v1), and the projections on v1 of Q̄ and K̄ at
    the first and last steps (``q_first``, ``q_last``, ``k_first``, ``k_last``; v1 oriented so that the fitted
    vectors' mean projects non-negatively)."""
    rows = []
    for layer, head in heads:
        part = stats[(stats["layer"] == layer) & (stats["head"] == head)].sort_values("step")
        first, last = part.iloc[0], part.iloc[-1]
        for fit_on in fits:
            v1 = projection_basis(vectors, layer, head, fit_on=fit_on)[:, 0]
            row = {"layer": layer, "head": head, "fit_on": fit_on, "head_dim": len(v1),
                   "first_step": int(first["step"]), "last_step": int(last["step"])}
            for kind, col in (("q", "q_mean"), ("k", "k_mean")):
                a, b = (np.asarray(r[col], dtype=np.float64) for r in (first, last))
                row[f"{kind}_axis_cos"] = _cos(v1, b - a)
                row[f"{kind}_first"], row[f"{kind}_last"] = float(a @ v1), float(b @ v1)
            rows.append(row)
    return pd.DataFrame(rows)


# ---- all heads together (Appendix D, Figure 23) ------------------------------------------------------------------

def concatenated_alignment(stats: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, seed, layer, step): cos and scalar product of the mean query and the mean key with the
    representations concatenated across heads (the outputs of the query and key maps, before the split into heads),
    as in Paper 1's Figure 23. The mean of a concatenation is the concatenation of the per-head means, so this is
    computed from the stored ``q_mean`` / ``k_mean`` of every head, in head order. Columns: run, seed, layer, step,
    cos_qk, dot_qk, dim (heads x head_dim)."""
    rows = []
    for (run, seed, layer, step), part in stats.groupby(["run", "seed", "layer", "step"], sort=True):
        part = part.sort_values("head")
        q = np.concatenate([np.asarray(v, dtype=np.float64) for v in part["q_mean"]])
        k = np.concatenate([np.asarray(v, dtype=np.float64) for v in part["k_mean"]])
        qn, kn = float(np.linalg.norm(q)), float(np.linalg.norm(k))
        rows.append({"run": run, "seed": seed, "layer": layer, "step": step,
                     "cos_qk": float(q @ k / (qn * kn)) if qn > 0 and kn > 0 else 0.0, "dot_qk": float(q @ k),
                     "dim": len(q)})
    return pd.DataFrame(rows)


# ---- which heads to show ----------------------------------------------------------------------------------------

def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


def head_dynamics(stats: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, layer, head), from the first to the last step of the run: ``cos_first``, ``cos_last``,
    ``gain`` = |cos(Q̄, K̄)| at the last step minus at the first, and ``displacement_cos`` =
    cos(Q̄_last - Q̄_first, K̄_last - K̄_first): +1 when the two means moved the same way, -1 when opposite ways."""
    rows = []
    for (run, layer, head), part in stats.groupby(["run", "layer", "head"], sort=True):
        part = part.sort_values("step")
        first, last = part.iloc[0], part.iloc[-1]
        rows.append({"run": run, "layer": layer, "head": head, "cos_first": first["cos_qk"],
                     "cos_last": last["cos_qk"], "gain": abs(last["cos_qk"]) - abs(first["cos_qk"]),
                     "displacement_cos": _cos(np.asarray(last["q_mean"], float) - np.asarray(first["q_mean"], float),
                                              np.asarray(last["k_mean"], float) - np.asarray(first["k_mean"], float)),
                     "q_drift": float(np.linalg.norm(np.asarray(last["q_mean"], float)
                                                     - np.asarray(first["q_mean"], float))),
                     "k_drift": float(np.linalg.norm(np.asarray(last["k_mean"], float)
                                                     - np.asarray(first["k_mean"], float)))})
    return pd.DataFrame(rows)


# A head "shows" a kind of dynamics when its two means moved clearly that way (a displacement cosine of at least 0.5
# in size: 60 degrees or less from parallel) and it ends outside the isotropic band: a head whose means barely moved,
# or that ends where random vectors lie, is no example of either kind, whatever its score.
MIN_DISPLACEMENT_COS = 0.5


def pick_heads(stats: pd.DataFrame, band: float = 0.0, min_displacement: float = MIN_DISPLACEMENT_COS) -> dict:
    """The two heads of Figure 12, chosen by rule, not by hand.

    For every head, ``gain`` is |cos(Q̄, K̄)| at the last step minus at the first, and ``displacement_cos`` the cosine
    between the displacements Q̄_last - Q̄_first and K̄_last - K̄_first (+1: the two means moved the same way, -1:
    opposite ways). Only heads whose alignment grew (gain > 0) and whose means moved that kind's way at all are
    candidates: displacement_cos > 0 for the *common-direction* head, which maximises ``gain * displacement_cos``,
    and < 0 for the *opposite-direction* head, which maximises ``gain * (-displacement_cos)``. (A head that lost
    alignment is never a candidate, though a negative gain times a negative cosine scores positive.) A candidate
    *qualifies* as an example of its kind when its displacement cosine is at least ``min_displacement`` that way and
    its final |cos| exceeds ``band`` (the isotropic band of its head dimension). The best qualifying head is picked;
    when none qualifies, the best candidate, ``qualified`` saying so; when there is no candidate, None.
    ``stats`` must hold one run.

    Returns {"common": (layer, head) | None, "opposite": (layer, head) | None,
    "qualified": {"common": bool, "opposite": bool}, "dynamics": head_dynamics frame with the two scores}.
    """
    if stats["run"].nunique() != 1:
        raise ValueError("pick_heads: pass the statistics of one run")
    dyn = head_dynamics(stats)
    grew = dyn["gain"] > 0
    dyn["common_score"] = np.where(grew, dyn["gain"] * dyn["displacement_cos"], np.nan)
    dyn["opposite_score"] = np.where(grew, -dyn["gain"] * dyn["displacement_cos"], np.nan)
    outside = dyn["cos_last"].abs() > band
    picked, qualified = {}, {}
    for name, sign in (("common", 1.0), ("opposite", -1.0)):
        score = dyn[f"{name}_score"]
        candidate = score > 0  # NaN (alignment did not grow) compares False
        ok = candidate & outside & (sign * dyn["displacement_cos"] >= min_displacement)
        qualified[name] = bool(ok.any())
        pool = ok if qualified[name] else candidate
        if pool.any():
            best = score.where(pool).idxmax()
            picked[name] = (int(dyn.at[best, "layer"]), int(dyn.at[best, "head"]))
        else:
            picked[name] = None
    return {**picked, "qualified": qualified, "dynamics": dyn}


# ---- the numbers of the paper's finding (decided by claims.rules.p1_s5) ---------------------------------------------

def null_cosine_bound(head_dim: int, level: float = 0.95) -> float:
    """|cos| that two independent isotropic Gaussian vectors of dimension ``head_dim`` exceed with probability
    1 - ``level`` (the two-sided reference band for cos(Q̄, K̄))."""
    return float(baseline.isotropic_cosine_quantile(0.5 + level / 2, head_dim))


def alignment_summary(stats: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the first and last step, the median |cos(Q̄, K̄)| over heads at each, the share of heads
    whose |cos| grew, the share of heads beyond the isotropic 95% band at each end, among those at the end the share
    with a positive cosine (common direction), the mean attention entropy over heads at each end (nats) and its
    relative change: the numbers of the paper's finding, which ``claims.rules.p1_s5.three_part_test`` decides."""
    rows = []
    for run, part in stats.groupby("run", sort=False):
        first_step, last_step = part["step"].min(), part["step"].max()
        first, last = part[part["step"] == first_step], part[part["step"] == last_step]
        bound = null_cosine_bound(int(part["head_dim"].iloc[0]))
        dyn = head_dynamics(part)
        beyond_last = last[last["cos_qk"].abs() > bound]
        row = {"run": run, "first_step": int(first_step), "last_step": int(last_step), "null_bound": bound,
               "median_abs_cos_first": float(first["cos_qk"].abs().median()),
               "median_abs_cos_last": float(last["cos_qk"].abs().median()),
               "share_aligned_more": float((dyn["gain"] > 0).mean()),
               "share_beyond_null_first": float((first["cos_qk"].abs() > bound).mean()),
               "share_beyond_null_last": float(len(beyond_last) / len(last)),
               "share_common_last": float((beyond_last["cos_qk"] > 0).mean()) if len(beyond_last) else float("nan"),
               "entropy_first": float(first["entropy"].mean()), "entropy_last": float(last["entropy"].mean()),
               "entropy_uniform": float(first["entropy_uniform"].mean())}
        row["entropy_change"] = row["entropy_last"] / row["entropy_first"] - 1
        rows.append(row)
    return pd.DataFrame(rows)


__all__ = ["CHAPTER", "Stage", "multiberts_stages", "suite_stages", "twin_stages", "pick_stages",
           "examples",
           "batches", "model_body", "head_statistics", "step_statistics", "head_vectors", "step_vectors", "svd_basis",
           "projection_basis", "project_vectors", "project_means", "concatenated_alignment", "head_dynamics",
           "pick_heads",
           "null_cosine_bound", "alignment_summary"]
