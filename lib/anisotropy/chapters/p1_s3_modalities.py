"""The modalities page (Paper 1, Section 3): per-family peaks and the conversion checks' numbers in words, and what
the page asks of a runtime."""

from __future__ import annotations

import pandas as pd

from anisotropy.chapters import p1_s3_token_level
from anisotropy.experiments import layerwise
from anisotropy.pages import budget, report
from anisotropy.claims.rules import p1_s3

# Positions one example becomes, per modality (the page sets no length): a LibriSpeech utterance (about 7 s, 50
# frames/s; Whisper's encoder always reads 30 s = 1500 frames), a 224 x 224 image in 16-pixel patches.
SPEECH_FRAMES, WHISPER_FRAMES, IMAGE_PATCHES = 350, 1500, 197


def glue_peaks(prefix: str, sub: pd.DataFrame) -> None:
    """Glue the highest and lowest per-model peaks of ``sub`` (a layer-wise frame) under names starting with
    ``prefix``, with their ratios to the isotropic level and the models above it at every layer; returns None."""
    absent = "not measured under this profile"
    if sub.empty:
        for name in ("top", "top_model", "low", "low_model", "min_ratio", "max_ratio", "n", "n_all_above"):
            report.glue(f"{prefix}_{name}", absent if "model" in name or name in ("top", "low") else "0")
        return
    peaks = layerwise.peaks(sub)
    top, low = peaks.loc[peaks["mean_cosine"].idxmax()], peaks.loc[peaks["mean_cosine"].idxmin()]
    report.glue(f"{prefix}_top", top["mean_cosine"], "{:.2f}")
    report.glue(f"{prefix}_top_model", top["label"])
    report.glue(f"{prefix}_low", low["mean_cosine"], "{:.2f}")
    report.glue(f"{prefix}_low_model", low["label"])
    report.glue(f"{prefix}_min_ratio", peaks["above_null"].min(), "{:.1f}")
    report.glue(f"{prefix}_max_ratio", peaks["above_null"].max(), "{:.1f}")
    report.glue(f"{prefix}_n", peaks.shape[0])
    report.glue(f"{prefix}_n_all_above", int((layerwise.share_above_null(sub) == 1).sum()))


def first(frame: pd.DataFrame, column: str, fmt: str, absent: str = "not checked under this profile") -> str:
    """The first non-missing value of ``column`` in ``frame`` formatted with ``fmt``, else ``absent``."""
    values = frame[column].dropna() if column in frame else []
    return fmt.format(values.iloc[0]) if len(values) else absent


def above_words(rows: pd.DataFrame) -> str:
    """Per model of ``rows`` (layer rows), how many of its layers are anisotropic in Appendix B's sense as the ledger's
    rules read it (``claims.rules.p1_s3.above_null``: the mean cosine above the layer's isotropic reference, 0 or a
    post-ReLU layer's support null, its whole interval above the isotropic q95 of its dimension): "A: 9 of 10
    layers; ...", or "" for no model."""
    return "; ".join(f"{label}: {int(p1_s3.above_null(p).sum())} of {len(p)} layers"
                     for label, p in rows.groupby("label", sort=False))


def every_layer_words(real_rows: pd.DataFrame) -> str:
    """Whether every layer of every real pretrained model in ``real_rows`` is anisotropic in that sense
    (``above_words``), in words: the ledger's rule ``most_layers_above_null`` asked for a share of 1 (the book's
    reading)."""
    every = p1_s3.most_layers_above_null(real_rows, share=1.0).holds
    if every is None:
        return "nothing to conclude under this profile"
    return ("so every layer of these trained models, speech and vision Transformers and the CNNs alike, is anisotropic "
            "in that sense" if every else "so not every layer of these trained models is anisotropic in that sense")


def glue_inputs(image_options: dict, self_trained: list[str], profile: str) -> None:
    """Glue what the offline inputs are, for the narrative: ``n_voices`` and ``speech_rates`` (the eSpeak voices and
    the words-per-minute range of ``data.speech.espeak_speech``), ``n_photos`` (the pool of ``data.images.PHOTOS``),
    ``image_side`` (the crops' side, ``image_options``) and ``selftrained_image_side`` (the self-trained vision
    suites' training images, ``training.recipes``)."""
    import inspect

    from anisotropy.data import images, speech
    from anisotropy.training import recipes

    report.glue("n_voices", len(speech.ESPEAK_VOICES))
    low, high = inspect.signature(speech.espeak_speech).parameters["rates"].default
    report.glue("speech_rates", f"{low} to {high}")
    report.glue("n_photos", len(images.PHOTOS))
    side = (image_options or {}).get("size", inspect.signature(images.photos).parameters["size"].default)
    report.glue("image_side", f"{side} × {side}")
    sides = sorted({recipes.suite(s, profile)[0].image_size for s in self_trained
                    if s in ("vit", "cnn")})
    report.glue("selftrained_image_side", " and ".join(f"{s} × {s}" for s in sides) or "small")


def clips_needed(short: pd.DataFrame, minimum: int) -> str:
    """How many clips the speech decoder layers of ``short`` (``experiments.layerwise.short_layers``) would need for ``minimum``
    vectors each, in words, from their fewest tokens per clip."""
    decoders = short[(short["modality"] == "speech") & (short["part"] == "decoder")]
    if decoders.empty:
        return "more clips than this profile reads"
    n = minimum / float(decoders["per_example"].min())
    return f"about {max(10, round(n, -1)):,.0f} clips"


def support_series_words(frame: pd.DataFrame, label: str, name: str) -> str:
    """What the non-negativity of the layers of the model ``label`` (layer rows with ``nonnegative`` and
    ``null_support``) explains of its mean cosines, in words, from the reference the ledger's rules read
    (``claims.rules.p1_s3.reference`` and ``excess``): its first and last layer's mean cosine, their isotropic
    reference, and what remains above it. ``name`` is how the sentence calls the model."""
    rows = frame[frame["label"] == label].sort_values("layer")
    if rows.empty:
        return f"{name} was not measured under this profile"
    ref, above = p1_s3.reference(rows), p1_s3.excess(rows)
    first, last = rows["mean_cosine"].iloc[0], rows["mean_cosine"].iloc[-1]
    if not ref.gt(0).any():
        return f"{name} goes from {first:.3f} to {last:.2f}, with no layer whose outputs are all non-negative"
    return (f"{name} goes from {first:.3f} to {last:.2f}, against {ref.iloc[0]:.2f} to {ref.iloc[-1]:.2f} for vectors "
            f"with its layers' own non-negative values and no preferred direction (the null of their support): the "
            f"sign of the coordinates sets that floor, not the rest; above it, its mean cosine is {above.iloc[0]:+.2f} "
            f"at the first layer and {above.iloc[-1]:+.2f} at the last")


def support_words(frame: pd.DataFrame) -> str:
    """Per model of ``frame`` (layer rows with ``nonnegative`` and ``null_support``): how many layers have only
    non-negative outputs, and their median mean cosine against the median of their support-fitting reference."""
    parts = []
    for label, rows in frame.groupby("label", sort=False):
        if "nonnegative" not in rows.columns:
            continue
        signs = rows["nonnegative"].astype(bool)
        words = f"{label}: {int(signs.sum())} of {len(rows)} layers non-negative"
        if signs.any():
            words += (f" (median mean cosine {rows.loc[signs, 'mean_cosine'].median():.2f}, against "
                      f"{rows.loc[signs, 'null_support'].median():.2f} for their support)")
        parts.append(words)
    return "; ".join(parts)


def plan(p: dict, out: budget.Plan) -> None:
    """Every pretrained speech model on ``n_speech`` clips and every vision model on ``n_images`` images
    (``per_model`` may change a model's count), read ``batch_size`` at a time, one sum of unit vectors per example and
    layer (``experiments.layerwise.FirstMoments``)."""
    pretrained = p["variant"] == "pretrained"
    speech = list(p["speech_models"]) if pretrained else []
    vision = list(p["vit_models"] + p["cnn_models"]) if pretrained else []
    examples = p1_s3_token_level.examples
    out.checkpoints += [budget.Checkpoint(m, None, examples(p, m, p["n_speech"]),
                                          WHISPER_FRAMES if "whisper" in m else SPEECH_FRAMES, batch=p["batch_size"],
                                          per_example=True) for m in speech]
    out.checkpoints += [budget.Checkpoint(m, None, examples(p, m, p["n_images"]), IMAGE_PATCHES,
                                          batch=p["batch_size"], per_example=True) for m in vision]
    out.data += [(p["speech_source"], p["n_speech"]), (p["image_source"], p["n_images"])]
