"""Paper 2's per-layer protocol: the sigma_1 share and the TwoNN dimension on batches of 4096 token vectors, for one
model, a list of models or a checkpoint series, through the results store.

Razzhigaev et al. (2024) measure each layer on batches of at least 4096 token vectors and report the mean and the
standard deviation over batches, of

- the anisotropy sigma_1^2 / sum_i sigma_i^2 of the centred batch (``measure.metrics.sigma1_share``, dimensionless), and
- the TwoNN intrinsic dimension of the batch (``measure.metrics.twonn_dimension``, a number of degrees of freedom).

Both need the vectors themselves, not streaming moments, so ``measure.batches.BatchedLayer`` is an accumulator for
``measure.taps.extract`` that shuffles a layer's valid vectors of the whole corpus (the paper's Section 2.2: the vectors are
shuffled before batching, so a batch is not a few texts' consecutive, near-duplicate tokens, and every batch draws
from every text), takes the first ``n_batches * batch_size`` of the shuffled order and computes the metrics on each
batch: memory is one pool per layer, whatever the corpus. Paper 1's mean cosine and drift are computed on the same
batches, so both papers' measures can be compared vector for vector.

Results are per-batch rows (``measure``, ``profile``, ``series``); ``summary`` turns them into one row per layer
with the mean and standard deviation over batches (how bell-shaped a profile is, is the bell measure of
``claims.curves``, which the ledger and the pages read), ``n_excluded`` counts the vectors dropped as zero, NaN or inf
(float16 overflow shows there), and a checkpoint's ``fingerprint`` (``models.identity.weights_digest``: its weight
files' SHA-256 as the Hub hashed them, or ``weights_fingerprint`` of the loaded weights where there is none) lets
``flag_identical`` detect checkpoints that carry identical weights. A decoder's last state
is measured before and after its final norm (``measure.final_norm``); clouds with planted geometry, on which both
measures are known, are in ``measure.planted``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch

from anisotropy.measure import taps
from anisotropy.measure.final_norm import find_final_norm, final_norm_split
from anisotropy.measure.batches import (BATCH_METRICS, BATCH_SIZE, DEFAULT_METRICS, ROBUST_METRICS, BatchedLayer,
                                        measure_pools)
from anisotropy import devices, executor, hub, progress, results
from anisotropy.data import sources
from anisotropy.experiments import layerwise
from anisotropy.models import registry
from anisotropy.models.identity import identity, weights_digest
from anisotropy.models.session import session
from anisotropy.training import checkpoints, recipes, trainer

STORE_CHAPTER = "paper2_spectral"  # every measurement of this module lives under results/<STORE_CHAPTER>/

# The stacks of a model layout that one forward pass measures together: Whisper's decoder part runs its encoder on the
# audio anyway, so ``profile`` of either stack (with shuffled vectors) measures both and stores the other under its
# own key, where the call for that stack then reads it (Paper 2's page asks for both).
ONE_PASS_PARTS = {"whisper": ("encoder", "decoder")}

# ---------------------------------------------------------------------------------------------------------------------
# One model
# ---------------------------------------------------------------------------------------------------------------------


def _until_full(examples: Iterable, layers: list[BatchedLayer]) -> Iterator:
    for example in examples:
        if layers and all(layer.full for layer in layers):
            return
        yield example


def measure(loaded, examples: Iterable, batch_size: int = BATCH_SIZE, n_batches: int = 4,
            metric_names: Sequence[str] = DEFAULT_METRICS, max_length: int = 128, extraction_batch: int = 8,
            keep_special: bool = False, split_final_norm: bool = False, device=None,
            part: str | None = None, shuffle_seed: int | None = 0, robust: bool = True) -> pd.DataFrame:
    """Per-batch metrics of every layer of ``loaded`` (a ``models.registry.Loaded``) on ``examples``, via ``measure.taps.extract``.

    With ``shuffle_seed`` every example is read and each layer's vectors of all of them are shuffled before
    batching, as the second paper does (``BatchedLayer``; which vectors count: ``measure.taps``); with None, text is fed only
    until every layer holds ``n_batches`` batches of ``batch_size`` vectors, in stream order. Returns one row per
    (layer, batch) with ``layer``, ``relative_depth`` (layer / last layer, in [0, 1]), ``n_layers``,
    ``after_final_norm`` (True for the state that went through a decoder's final norm), ``batches_available`` and
    the metrics. With ``split_final_norm`` the last block's output appears twice at the last
    layer: before (``after_final_norm`` False) and after the final norm (True). Raises when a layer gets no full
    batch: give more text or a smaller ``batch_size``. ``part`` ("encoder" / "decoder" of an encoder-decoder such
    as Whisper, see ``measure.taps``) measures that stack alone, its layers numbered from 0 within it. ``robust``:
    with ``sigma1_share``, also ``ROBUST_METRICS`` (``BatchedLayer``).
    """
    return measure_parts(loaded, examples, (part,), batch_size=batch_size, n_batches=n_batches,
                         metric_names=metric_names, max_length=max_length, extraction_batch=extraction_batch,
                         keep_special=keep_special, split_final_norm=split_final_norm, device=device,
                         shuffle_seed=shuffle_seed, robust=robust)[part]


def measure_parts(loaded, examples: Iterable, parts: Sequence[str | None], batch_size: int = BATCH_SIZE,
                  n_batches: int = 4, metric_names: Sequence[str] = DEFAULT_METRICS, max_length: int = 128,
                  extraction_batch: int = 8, keep_special: bool = False, split_final_norm: bool = False,
                  device=None, shuffle_seed: int | None = 0, robust: bool = True) -> dict[str | None, pd.DataFrame]:
    """``measure`` of each stack in ``parts`` of an encoder-decoder, from one pass of the examples through the model
    (``{part: frame}``); ``parts`` of one element is ``measure`` itself (None: the whole model). Several parts need
    ``shuffle_seed``: every example is then read whichever stack is asked for, so each frame equals its own
    ``measure``."""
    if len(parts) > 1 and (shuffle_seed is None or None in parts):
        raise ValueError("several parts are measured in one pass only with shuffle_seed and named parts")

    tok = loaded.preprocessor
    if loaded.spec.stack == "decoder" and "token_type_ids" in getattr(tok, "model_input_names", ()):
        # The decoders of Paper 2 take no token types, but GPT-2 and GPT-J would add wte(token_type_ids) -- a vector
        # common to every token -- if a tokenizer (e.g. the offline BPE) handed them zeros.
        tok.model_input_names = [n for n in tok.model_input_names if n != "token_type_ids"]
    created: list[BatchedLayer] = []

    def factory(dim: int) -> BatchedLayer:
        created.append(BatchedLayer(dim, batch_size, n_batches, metric_names, shuffle_seed=shuffle_seed,
                                    robust=robust))
        return created[-1]

    split = contextlib.nullcontext(False)
    if split_final_norm:
        split = final_norm_split(loaded.model)
    with split as has_split:
        result = taps.extract(loaded, _until_full(examples, created), batch_size=extraction_batch,
                              max_length=max_length, keep_special=keep_special, device=device,
                              stats_factory=factory, part=parts[0] if len(parts) == 1 else None)
    return {part: batch_rows(loaded, result, part, batch_size=batch_size, split_final_norm=has_split,
                             keep_special=keep_special) for part in parts}


def batch_rows(loaded, result, part: str | None = None, *, batch_size: int, split_final_norm: bool = False,
               keep_special: bool = False) -> pd.DataFrame:
    """``measure``'s per-batch frame of one stack (``part``; None: the whole model) of a ``measure.taps.extract``
    result whose accumulators are ``BatchedLayer``s (``measure_parts`` calls it; so can a caller whose own pass fed
    them, e.g. through a ``taps.Tee``). ``split_final_norm``: the pass ran under ``final_norm_split`` and it applied
    (the last state appears twice). Raises when a layer has no full batch of ``batch_size``."""
    has_final_norm = find_final_norm(loaded.model) is not None
    # where the tokenizer opens every text with a special token (<bos>, [CLS]) that the protocol leaves out, the first
    # position of a sequence, an attention sink's usual place, is not among the measured vectors
    first_measured = bool(keep_special or not opens_with_special(loaded.preprocessor))
    # a stack's own layers, numbered from 0 (taps keeps the whole model's numbering)
    layers = (result if part is None else
              {result.layer_in_part[layer]: result[layer] for layer in result if result.parts[layer] == part})
    frame = _batch_rows(loaded, layers, split_final_norm, has_final_norm, batch_size)
    frame["first_position_measured"] = first_measured
    return frame


def opens_with_special(preprocessor) -> bool:
    """Whether a text tokenizer (or a processor's) puts a special token at the first position of every text: GPT-2
    and SmolLM2 do not, Gemma (<bos>) and BERT ([CLS]) do. False for a preprocessor of images or audio."""
    tok = getattr(preprocessor, "tokenizer", preprocessor)
    if not hasattr(tok, "all_special_ids") or not callable(tok):
        return False
    ids = tok("a", add_special_tokens=True)["input_ids"]
    return bool(len(ids) and ids[0] in set(tok.all_special_ids))


def _batch_rows(loaded, result: dict, has_split: bool, has_final_norm: bool, batch_size: int) -> pd.DataFrame:
    """``measure``'s frame of one stack's ``{layer: BatchedLayer}``."""
    layers = sorted(result)
    last = layers[-1] - 1 if has_split else layers[-1]
    measure_pools(result[layer] for layer in layers)
    short = {layer: result[layer].n for layer in layers if result[layer].batches_done == 0}
    if short:
        raise ValueError(
            f"{loaded.spec.name}: fewer than batch_size={batch_size} vectors in layer(s) {sorted(short)} "
            f"(got {min(short.values())}); give more text or a smaller batch_size")
    rows = []
    for layer in layers:
        stats = result[layer]
        shown = min(layer, last)
        for row in stats.rows():
            rows.append({"layer": shown, "relative_depth": shown / last if last else 0.0, "n_layers": last + 1,
                         "d": stats.dim, "after_final_norm": bool(has_final_norm and layer == layers[-1]),
                         "batches_available": stats.batches_done, "n_seen": stats.n,
                         "n_excluded": stats.n_excluded, **row})
    return pd.DataFrame(rows)


def by_length_within(texts: Sequence, window: int) -> list:
    """``texts`` with each run of ``window`` consecutive texts sorted by length: the same texts, and nearly the same
    order at the scale of a batch of vectors, but a forward batch of similar lengths wastes little on padding
    (about half of a batch of random paragraphs is padding otherwise)."""
    texts = list(texts)
    return [t for start in range(0, len(texts), window) for t in sorted(texts[start:start + window], key=len)]


def weights_fingerprint(model) -> str:
    """SHA-256 (16 hex digits) of every tensor of the state dict (names, dtypes, shapes and bytes, in name order):
    equal fingerprints mean bit-identical weights. Copies every weight to the host: ``profile`` uses it only where
    the files give no digest (``models.identity.weights_digest``)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def _torch_dtype(dtype):
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, str(dtype).removeprefix("torch."))


def profile(model: str | Path, variant: str = "pretrained", revision: str | None = None, *, source: str = "prose",
            n_texts: int = 256, data_seed: int = 0, batch_size: int = BATCH_SIZE, n_batches: int = 4,
            metric_names: Sequence[str] = DEFAULT_METRICS, max_length: int = 128, extraction_batch: int = 8,
            split_final_norm: bool = False, model_seed: int = 0, device=None, dtype=None,
            store=None, extra: dict | None = None, part: str | None = None,
            data_options: dict | None = None, shuffle: bool = True, keep_special: bool = False,
            robust: bool = True) -> pd.DataFrame:
    """``measure`` one model (a registry name with a variant and revision, or a ``save_pretrained`` folder) on
    ``data.load(source, n_texts, data_seed)``, cached in the results store under ``STORE_CHAPTER``.

    Adds the columns ``model`` (registry name or folder), ``label`` (legend; ``extra["label"]`` overrides it),
    ``display``, ``variant``, ``revision``, ``stack`` ("encoder" / "decoder"), ``fingerprint``
    (``models.identity.weights_digest``, read while the checkpoint is still in the cache; ``weights_fingerprint`` of the
    loaded weights where the files give none) and the ``extra`` constant columns (not part of the key). ``model_seed`` seeds untrained
    weights. ``device`` "auto" picks the GPU when there is one; ``dtype`` e.g. "float16" for large models.
    ``part`` measures one stack of an encoder-decoder (Whisper: "encoder" on frames, "decoder" on transcript tokens)
    and ``data_options`` go to ``data.load`` (e.g. eSpeak speech); both enter the key only when given.
    ``shuffle``: the layer's vectors are shuffled (seed ``data_seed``) before they are split into batches, as the
    second paper does (``BatchedLayer``). ``keep_special`` keeps the special tokens (<bos>, [CLS]) among the
    vectors, which the protocol leaves out (``measure.taps``); it enters the key only when True. ``robust``: with
    ``sigma1_share``, also ``ROBUST_METRICS`` (two more shares per batch); it enters the key only when False.
    """
    metric_names = tuple(metric_names)
    folder = Path(model)
    is_folder = _is_folder(model)
    key = _profile_key(model=model, variant=variant, revision=revision, source=source, n_texts=n_texts,
                       data_seed=data_seed, batch_size=batch_size, n_batches=n_batches, metric_names=metric_names,
                       max_length=max_length, split_final_norm=split_final_norm, model_seed=model_seed, dtype=dtype,
                       part=part, data_options=data_options, shuffle=shuffle, keep_special=keep_special,
                       robust=robust)

    store = store or results.Store()

    def compute() -> pd.DataFrame:
        dev = devices.resolve(device)
        progress.say(f"measuring {(extra or {}).get('label') or model}" + (f" at {revision}" if revision else "")
                     + (f" ({part})" if part else "") + f", {n_texts} texts of {source}")
        options = {} if is_folder else {"variant": variant, "revision": revision, "seed": model_seed}
        with session(folder if is_folder else model, batch_size=extraction_batch, device=dev,
                     dtype=_torch_dtype(dtype), **options) as loaded:
            # the weight files' hashes while the checkpoint is in the cache; then it may leave it (``registry.load``'s
            # release, which would otherwise come before them)
            fingerprint = weights_digest(model, variant, revision, model_seed) or weights_fingerprint(loaded.model)
            if revision is not None and not is_folder:
                hub.release(*loaded.spec.hub_location(revision))
            # A self-trained checkpoint is saved with its LM head; the hidden states are the base model's, and
            # computing logits over the vocabulary for every token would only cost time.
            loaded.model = getattr(loaded.model, "base_model", loaded.model)
            texts = sources.load(source, n_texts, seed=data_seed, **dict(data_options or {}))
            if all(isinstance(t, str) for t in texts):
                texts = by_length_within(texts, 8 * extraction_batch)
            together = ONE_PASS_PARTS.get(loaded.spec.layout, ())
            parts = together if shuffle and part in together else (part,)
            frames = measure_parts(loaded, texts, parts, batch_size=batch_size, n_batches=n_batches,
                                   metric_names=metric_names, max_length=max_length,
                                   extraction_batch=extraction_batch, split_final_norm=split_final_norm,
                                   keep_special=keep_special, device=dev, shuffle_seed=data_seed if shuffle else None,
                                   robust=robust)
            head = {"model": results.checkpoint_key(folder)["folder"] if is_folder else str(model),
                    "label": loaded.label,
                    "display": loaded.spec.display,
                    "variant": loaded.variant, "revision": revision or "", "stack": loaded.spec.stack}
        for frame in frames.values():
            for i, (column, value) in enumerate(head.items()):
                frame.insert(i, column, value)
            frame["fingerprint"] = fingerprint
        for other in parts:
            if other != part:  # what a call for that stack would store, under its own key
                store.cached(STORE_CHAPTER, dict(key, part=other), lambda f=frames[other]: f)
        return frames[part]

    frame = store.cached(STORE_CHAPTER, key, compute)
    for column, value in (extra or {}).items():
        frame[column] = value
    return frame


def _is_folder(model) -> bool:
    return Path(model).is_dir() and str(model) not in registry.MODELS


def _profile_key(*, model, variant, revision, source, n_texts, data_seed, batch_size, n_batches, metric_names,
                 max_length, split_final_norm, model_seed, dtype, part, data_options, shuffle,
                 keep_special=False, robust=True) -> dict:
    """What ``profile`` stores its frame under (before the code's fingerprint is added); its keywords are
    ``profile``'s arguments of the same names."""
    key = {"what": "paper 2 per-layer batches", "model": identity(model, variant, revision),
           "model_seed": model_seed, "source": source, "n_texts": n_texts,
           "data_seed": data_seed, "batch_size": batch_size, "n_batches": n_batches,
           "metrics": list(metric_names), "max_length": max_length, "split_final_norm": split_final_norm,
           "dtype": str(dtype), "shuffle_seed": data_seed if shuffle else None}
    if part is not None:
        key["part"] = part
    if data_options:
        key["data_options"] = dict(data_options)
    if keep_special:
        key["keep_special"] = True
    if not robust:
        key["robust"] = False
    return key


# ---------------------------------------------------------------------------------------------------------------------
# Several models, checkpoint series
# ---------------------------------------------------------------------------------------------------------------------


def _entry_arguments(entry, kwargs: dict) -> tuple[dict, dict]:
    """``profile``'s keyword arguments for one entry of ``profiles``, and the entry's constant columns."""
    entry = {"model": entry} if isinstance(entry, (str, Path)) else dict(entry)
    args = {k: entry.pop(k) for k in ("model", "variant", "revision", "model_seed", "n_batches", "part", "source",
                                      "n_texts", "batch_size", "max_length", "data_options") if k in entry}
    return {**kwargs, **args}, entry


def _entry_stored(entry, kwargs: dict) -> bool:
    """Whether ``profile`` would read this entry's frame from the store instead of measuring it."""
    import inspect

    arguments, extra = _entry_arguments(entry, kwargs)
    bound = inspect.signature(profile).bind(**arguments, extra=extra)
    bound.apply_defaults()
    a = bound.arguments
    key = _profile_key(**{name: a[name] for name in inspect.signature(_profile_key).parameters})
    return a["store"].stored(STORE_CHAPTER, key, profile)


def _profile_entry(entry, kwargs: dict, skip_unavailable: bool):
    """``(frame, None)``, or ``(None, Skipped)`` for a model that cannot be had here: one entry of ``profiles``."""
    arguments, entry = _entry_arguments(entry, kwargs)
    try:
        return profile(**arguments, extra=entry), None
    except hub.Offline:
        raise  # nothing else will load either: stop at the first, naming it
    except (hub.Unavailable, registry.ModelTooLargeError) as exc:
        if not skip_unavailable:
            raise
        ref = layerwise.ModelRef(str(arguments["model"]), arguments.get("variant", "pretrained"),
                                 arguments.get("revision"), entry.get("label"))
        return None, layerwise.Skipped(ref, str(exc).splitlines()[0])


def profiles(models: Sequence[dict | str], skip_unavailable: bool = True, fan_out: str = "none", **kwargs):
    """``profile`` of each entry, concatenated, and the entries that could not be measured here.

    An entry is a registry name or a dict with ``model`` and optionally ``variant``, ``revision``, ``model_seed``,
    ``n_batches`` (overriding the keyword argument) and constant columns (``label``, ``step``, ``seed``...).
    Returns ``(frame, skipped)``: ``skipped`` lists ``experiments.layerwise.Skipped`` (one-line reason: gated, a missing revision,
    any other error while it loads (``hub.load``), too large), raised instead when ``skip_unavailable`` is False.
    ``fan_out`` measures the entries through ``executor.map`` ("none": one after another here; "auto" or a scheduler
    address: in parallel, each result written to this store by the worker that computes it).
    """
    kwargs = {**kwargs, "store": kwargs.get("store") or results.Store()}
    done = executor.map(functools.partial(_profile_entry, kwargs=kwargs, skip_unavailable=skip_unavailable),
                        list(models), retries=1, ready=functools.partial(_entry_stored, kwargs=kwargs),
                        **executor.fan_out(fan_out))
    frames = [frame for frame, _ in done if frame is not None]
    skipped = [s for _, s in done if s is not None]
    layerwise.stop_if_nothing_measured(frames, skipped)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), skipped


def series(entries: Sequence[dict], **kwargs):
    """A checkpoint series (entries as for ``profiles``, each with a ``step`` and a ``label`` naming the run), with
    ``same_weights_as`` (``flag_identical``). Returns ``(frame, skipped)``."""
    frame, skipped = profiles(entries, **kwargs)
    return (flag_identical(frame) if len(frame) else frame), skipped


def describe(entries: Sequence[dict]) -> list[str]:
    """One line per model of a chapter's entries for the provenance box: display name, hub id (with its revisions
    when several are measured) or folder, and what the weights are."""
    groups: dict[tuple, list[dict]] = {}
    for e in entries:
        groups.setdefault((str(e["model"]), e.get("variant", "pretrained"), e.get("label")), []).append(e)
    lines = []
    for (model, variant, label), group in groups.items():
        folder = Path(model).is_dir() and model not in _registry_names()
        ref = layerwise.ModelRef(model, "self-trained" if folder else variant, label=label)
        line = layerwise.describe(ref)
        revisions = [e["revision"] for e in group if e.get("revision")]
        if revisions:
            shown = revisions[0] if len(revisions) == 1 else f"{revisions[0]} … {revisions[-1]}"
            line += f", {len(revisions)} revision{'s' if len(revisions) > 1 else ''} ({shown})"
        elif folder and len(group) > 1:
            line += f", {len(group)} checkpoints"
        lines.append(line)
    return lines


def _registry_names():
    return registry.MODELS


def hub_checkpoints(name: str, revisions: Sequence[str] = (), **columns) -> tuple[list[dict], list[str]]:
    """Entries for ``series``: one per hub revision of a registry model, with its ``step`` (label: the model), and a
    note per requested revision the model does not have (Bloom sizes have different branches). No ``revisions``:
    every revision the registry lists for the model."""
    kept, missing = registry.checkpoint_revisions(name, revisions)
    notes = [f"{name} has no checkpoint {r}; the nearest that exist: "
             f"{', '.join(hub.nearest(r, registry.spec(name).revisions))}" for r in missing]
    return [{"model": name, "revision": r, "step": hub.step(r, required=True), "label": name, **columns}
            for r in kept], notes


def suite_checkpoints(suite: str, profile_name: str = "local", seeds: Sequence[int] | None = None,
                      final_only: bool = False, train_missing: bool = False) -> tuple[list[dict], list[str]]:
    """Entries for ``series``: the checkpoints of a self-trained suite of ``training`` that are on disk, with
    ``suite``, ``seed``, ``step``, ``loss`` (validation loss at that step, nats) and ``label`` ("<suite> seed <k>"),
    and one note per seed whose training is missing or unfinished. Training belongs to the checkpoint-suites chapter;
    ``train_missing=True`` trains here instead."""
    entries, notes = [], []
    try:
        suite_recipes = recipes.suite(suite, profile_name)
    except KeyError as exc:
        return [], [f"{suite}: no such suite in profile {profile_name!r} ({exc.args[0]})"]
    for recipe in suite_recipes:
        if seeds is not None and recipe.seed not in seeds:
            continue
        found = trainer.train(recipe, progress=False) if train_missing else checkpoints.checkpoints(recipe)
        if not found or found[-1].step != recipe.steps:
            notes.append(f"{suite} seed {recipe.seed}: not trained yet (run the checkpoint-suites chapter first)")
            continue
        for c in found[-1:] if final_only else found:
            entries.append({"model": str(c.path), "step": c.step, "seed": recipe.seed, "suite": suite,
                            "kind": recipe.kind, "loss": c.loss, "label": f"{suite} seed {recipe.seed}"})
    return entries, notes


KIND_NAMES = {"mlm": "encoder, MLM", "clm": "decoder, CLM", "char-mlm": "byte-level encoder, MLM"}


def model_entries(pretrained: Sequence[str] = (), untrained: Sequence[str] = (), suites: Sequence[str] = (),
                  suite_seeds: Sequence[int] | None = (0,), profile_name: str = "local",
                  untrained_n_batches: int | None = None, train_missing: bool = False, tiny: Sequence[str] = (),
                  speech: Sequence[str] = (), speech_data: dict | None = None,
                  ) -> tuple[list[dict], list[str]]:
    """The entries of a chapter that compares models: registry models with their real weights (``pretrained``), at
    true size with random weights (``untrained``, optionally with fewer batches, since they are slow on a CPU), the
    final checkpoints of self-trained suites, and toy-size random models (``tiny``, for the smoke profile). Labels
    say which is which (column ``origin``). ``speech``: pretrained encoder-decoder speech models (Whisper), entered
    twice, as an encoder (on frames) and as a decoder (on transcript tokens), each measured on ``speech_data``
    (``source``, ``n_texts``, ``batch_size``, ``n_batches``, ``max_length``, ``data_options`` overriding the text
    settings). Returns ``(entries, notes)``, notes naming suites that are not trained."""
    entries = [{"model": m, "variant": "pretrained", "label": registry.spec(m).display, "origin": "pretrained"}
               for m in pretrained]
    for m in untrained:
        entry = {"model": m, "variant": "untrained", "label": f"{registry.spec(m).display} (untrained)",
                 "origin": "untrained"}
        if untrained_n_batches:
            entry["n_batches"] = untrained_n_batches
        entries.append(entry)
    entries += [{"model": m, "variant": "tiny", "label": f"{registry.spec(m).display} (tiny, random)",
                 "origin": "tiny"} for m in tiny]
    for m in speech:
        for stack in ("encoder", "decoder"):
            entries.append({"model": m, "variant": "pretrained", "part": stack, "stack": stack,
                            "label": f"{registry.spec(m).display} {stack} (speech)", "origin": "pretrained",
                            **dict(speech_data or {})})
    notes = []
    for suite in suites:
        found, missing = suite_checkpoints(suite, profile_name, seeds=suite_seeds, final_only=True,
                                           train_missing=train_missing)
        notes += missing
        for e in found:
            e.update(label=f"self-trained {KIND_NAMES.get(e['kind'], e['kind'])} (seed {e['seed']})",
                     origin="self-trained")
        entries += found
    return entries, notes


def model_table(names: Sequence[str]) -> pd.DataFrame:
    """The registry models ``names`` with what running them takes: parameters, weights in GiB at float32 and
    float16 (activations come on top), and the access condition."""
    rows = []
    for name in names:
        s = registry.spec(name)
        rows.append({"model": name, "paper name": s.display, "hub id": s.hub_id, "stack": s.stack,
                     "parameters (M)": (s.n_params or 0) / 1e6, "float32 (GiB)": memory_gib(name, "float32"),
                     "float16 (GiB)": memory_gib(name, "float16"), "access": s.access,
                     "checkpoints": len(s.revisions)})
    return pd.DataFrame(rows)


def flag_identical(frame: pd.DataFrame, group: str = "label", order: str = "step") -> pd.DataFrame:
    """Add ``same_weights_as``: for each checkpoint (row group with one ``fingerprint``), the ``order`` value of the
    earliest checkpoint of the same ``group`` with bit-identical weights (equal fingerprints: equal weight files), or
    NaN when its weights are new."""
    frame = frame.copy()
    frame["same_weights_as"] = np.nan
    groups = frame.groupby(group, sort=False) if group in frame.columns else [(None, frame)]
    for _, part in groups:
        first: dict[str, float] = {}
        for value, fp in part.sort_values(order)[[order, "fingerprint"]].drop_duplicates().itertuples(index=False):
            first.setdefault(fp, value)
            if first[fp] != value:
                frame.loc[part.index[(part[order] == value).to_numpy()], "same_weights_as"] = first[fp]
    return frame


# ---------------------------------------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------------------------------------


def summary(frame: pd.DataFrame, by: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per layer (and per ``by`` group, default every non-metric column that identifies a model): for each
    metric, its mean over batches and ``<metric>_std`` (standard deviation over batches, ddof=0, as
    ``measure.metrics.batched``), and ``n_batches``."""
    present = [m for m in (*BATCH_METRICS, *ROBUST_METRICS) if m in frame.columns]
    if by is None:
        per_batch = {"batch", "n_vectors", "n_seen", "n_excluded", "batches_available", *present}
        by = [c for c in frame.columns if c not in per_batch]
    grouped = frame.groupby(list(by), sort=False, dropna=False)
    out = grouped[present].mean()
    stds = grouped[present].std(ddof=0).add_suffix("_std")
    out = out.join(stds)
    out["n_batches"] = grouped.size()
    return out.reset_index()


def dropped(frame: pd.DataFrame) -> int:
    """Vectors dropped as zero, NaN or inf (``BatchedLayer.n_excluded``) over every state of every model in a
    ``measure`` frame: each state's count once (its first batch's row)."""
    if not len(frame) or "n_excluded" not in frame.columns:
        return 0
    return int(frame.loc[frame["batch"] == 0, "n_excluded"].sum())


def layer_average(frame: pd.DataFrame, metric: str = "twonn_dimension", by: Sequence[str] | None = None,
                  ) -> pd.DataFrame:
    """Paper 2, Figure 2: per model or checkpoint, ``metric`` averaged over its layers within each batch (batch k of
    every layer holds the same tokens), then the mean and ``<metric>_std`` (ddof=0) of that average over batches.
    Pass a frame measured without ``split_final_norm`` (or filtered to one state per layer)."""
    per_layer = {"layer", "relative_depth", "d", "after_final_norm", "n_seen", "n_excluded", "batches_available"}
    if by is None:
        by = [c for c in frame.columns if c not in per_layer | {"batch", "n_vectors", *BATCH_METRICS, *ROBUST_METRICS}]
    per_batch = frame.groupby([*by, "batch"], sort=False, dropna=False)[metric].mean().reset_index()
    grouped = per_batch.groupby(list(by), sort=False, dropna=False)[metric]
    out = grouped.mean().to_frame()
    out[f"{metric}_std"] = grouped.std(ddof=0)
    out["n_batches"] = grouped.size()
    return out.reset_index()


def memory_gib(name: str, dtype: str = "float32") -> float:
    """Memory of a registry model's weights in GiB at ``dtype`` (activations for a batch of text come on top)."""
    n = registry.spec(name).n_params or 0
    return n * torch.empty(0, dtype=_torch_dtype(dtype)).element_size() / 2**30
