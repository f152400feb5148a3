"""The character-level page (Paper 1, Section 3): its peaks, CANINE's parts, the models it follows layer by layer and
RXNMapper's ALBERT in words and table rows, and what it asks of a runtime."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.chapters import p1_s3_token_level
from anisotropy.experiments import layerwise
from anisotropy.models import checks, registry
from anisotropy.pages import budget, report

# The models whose mean cosine the narrative follows layer by layer: (glue prefix, legend label).
SERIES = (("canine_s", "CANINE-s (untrained)"), ("byt5", "ByT5 (untrained)"))
SELF_TRAINED = "self-trained char-mlm"  # how the legend labels of the self-trained byte-level suite begin
RXN = "rxnmapper-albert"  # the real pretrained character-level model, of reaction SMILES
RXN_REACTIONS = 36  # the reactions it reads unless ``per_model`` says otherwise (the parameters cell's value)
RXN_VOCABULARY = 591  # its vocabulary, said when the model is not loaded under a profile


def glue_peaks(frame: pd.DataFrame, peaks: pd.DataFrame) -> None:
    """Glue the numbers under the page's figure from the layer-wise ``frame`` and its per-model ``peaks``: the models
    (``char_n_models``), what the bands rest on (``char_*``, ``p1_s3_token_level.glue_sample``), the highest and the
    lowest peak with their models, the range of the peaks over the isotropic 95th percentile, the models above it at
    every layer and those that are not, and the page's dimensions with their percentiles (``char_dims``,
    ``char_q95s``)."""
    report.glue("char_n_models", frame["label"].nunique())
    p1_s3_token_level.glue_sample("char", frame)
    p1_s3_token_level.glue_extremes("char_", frame, peaks)
    share = layerwise.share_above_null(frame)
    report.glue("char_not_all_above", ", ".join(share.index[share < 1]) or "none")
    dims = sorted(frame["dim"].unique())
    report.glue("char_dims", ", ".join(f"{d}" for d in dims))
    report.glue("char_q95s", ", ".join(f"{q:.3f}" for q in layerwise.null_q95(dims)))


def canine_parts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per CANINE model and part of ``frame`` (character, downsampled, upsampled): its layers, the most vectors of a
    layer and the mean cosine of its first and last layer; glues the parts shown (``canine_parts_shown``)."""
    canine = frame[frame["display"].str.startswith("CANINE")]
    report.glue("canine_parts_shown", ", ".join(dict.fromkeys(canine["part"])) if len(canine) else "none")
    if canine.empty:
        return frame.head(0)[["label", "part"]]
    return (canine.groupby(["label", "part"], sort=False)
            .agg(layers=("layer", lambda s: f"{s.min()}–{s.max()}"), positions=("n", "max"),
                 mean_cosine_first=("mean_cosine", "first"), mean_cosine_last=("mean_cosine", "last"))
            .reset_index())


def parts_table(parts: pd.DataFrame):
    """CANINE's parts (``canine_parts``) as the page's table."""
    return parts.rename(columns={"label": "model", "positions": "vectors per layer", "mean_cosine_first": "first layer",
                                 "mean_cosine_last": "last layer"}).style.format(
        {"first layer": "{:.3f}", "last layer": "{:.3f}"}).hide(axis="index")


def glue_series(frame: pd.DataFrame) -> None:
    """Glue each model of ``SERIES`` and the self-trained byte-level encoder layer by layer
    (``p1_s3_token_level.glue_model_series``: ``selftrained_char_*``), and the encoder's lowest layer against the
    isotropic 95th percentile of its dimension (``selftrained_char_low``)."""
    for key, label in SERIES:
        p1_s3_token_level.glue_model_series(key, frame, label)
    trained = [lab for lab in frame["label"].unique() if lab.startswith(SELF_TRAINED)]
    p1_s3_token_level.glue_model_series("selftrained_char", frame, trained[0] if trained else "")
    own = frame[frame["label"] == trained[0]] if trained else frame.head(0)
    if own.empty:
        report.glue("selftrained_char_low", "not measured under this profile")
        return
    low = own.loc[own["mean_cosine"].idxmin()]
    report.glue("selftrained_char_low", f"{low['mean_cosine']:.2f} at layer {int(low['layer'])}, "
                f"{'below' if low['mean_cosine'] < low['null_q95'] else 'above'} the isotropic 95th "
                f"percentile of its dimension ({low['null_q95']:.3f} for d = {int(low['dim'])})")


def glue_same_bytes(texts, max_length: int) -> None:
    """Glue the share of ordered pairs of byte positions, as ByT5 reads ``texts`` (``max_length`` - 1 bytes each, then
    its end token), that hold the same byte value (``same_byte_pairs``)."""
    byte_ids = [np.frombuffer(t.encode("utf-8")[: max_length - 1], dtype=np.uint8) for t in texts]
    counts = np.bincount(np.concatenate(byte_ids), minlength=256).astype(float)
    report.glue("same_byte_pairs", (counts * (counts - 1)).sum() / (counts.sum() * (counts.sum() - 1)), "{:.3f}")


def glue_rxn(frame: pd.DataFrame, per_model: dict, seed: int) -> None:
    """Glue what the page says of RXNMapper's ALBERT (``rxn_*``): whether it was measured, its size, its layers
    (``glue_model_series``), its vectors per layer, the share of its layers above the isotropic 95th percentile, and
    its masked-token check (``models.checks.smiles_check`` on the reactions it read); and the vectors per layer the
    Section 3 pages aim at (``char_min_vectors_aim``)."""
    labels = [lab for lab in frame["label"].unique()
              if frame.loc[frame["label"] == lab, "model"].iloc[0] == RXN] if "model" in frame else []
    rxn = frame[frame["label"].isin(labels)]
    n = per_model.get(RXN, {}).get("n", RXN_REACTIONS)
    report.glue("rxn_measured", "measured here" if len(rxn) else "not measured under this profile")
    p1_s3_token_level.glue_model_series("rxn", frame, labels[0] if labels else "")
    spec = registry.spec(RXN)
    report.glue("rxn_size", f"{spec.n_params / 1e6:.1f} M parameters, d = {int(rxn['dim'].iloc[0]) if len(rxn) else 256}")
    report.glue("rxn_vectors", f"{int(rxn['n'].min()):,}" if len(rxn) else "no")
    report.glue("rxn_above", f"{(rxn['mean_cosine'] > rxn['null_q95']).mean():.0%}" if len(rxn) else "none")
    check = checks.smiles_check(RXN, n=n, seed=seed) if len(rxn) else None
    row = None if check is None else check.iloc[0]
    report.glue("rxn_reactions", f"{n}")
    report.glue("char_min_vectors_aim", layerwise.MIN_VECTORS, "{:,}")
    report.glue("rxn_vocabulary", f"{registry.load(RXN).preprocessor.vocab_size}" if len(rxn) else f"{RXN_VOCABULARY}")
    report.glue("rxn_masked", "-" if row is None else f"{int(row['masked'])}")
    report.glue("rxn_accuracy", "-" if row is None else f"{row['accuracy']:.0%}")
    report.glue("rxn_unigram", "-" if row is None else f"{row['unigram_accuracy']:.0%}")
    report.glue("rxn_common", "-" if row is None else f"\"{row['most_common_token']}\"")


def plan(p: dict, out: budget.Plan) -> None:
    """The token-level page's protocol (``p1_s3_token_level.plan``) on the character-level models."""
    p1_s3_token_level.plan(p, out)
