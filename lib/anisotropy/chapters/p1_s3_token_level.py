"""The token-level page (Paper 1, Section 3): its peaks, series, real decoders' checks and quantisation in words and
table rows, and what it asks of a runtime. The wording the three Section 3 pages share (a model's layers in words, what
a figure's bands rest on, the models not measured) is here too, and the character-level and modalities pages call it."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from anisotropy.claims import learnt
from anisotropy.experiments import layerwise
from anisotropy.models import checks, registry
from anisotropy.pages import budget, report

# The models whose mean cosine the narrative follows layer by layer: (glue prefix, legend label).
SERIES = (("bert_untrained", "BERT (untrained)"), ("roberta_untrained", "RoBERTa (untrained)"),
          ("gpt2_untrained", "GPT-2 (untrained)"), ("t5_untrained", "T5 (untrained)"),
          ("minilm", "all-MiniLM-L6-v2"), ("mpnet", "all-mpnet-base-v2"),
          ("smollm2", "SmolLM2-135M-Instruct (Q4_1)"), ("gemma3", "Gemma-3-270M (Q4_K_M)"))
SIZED = ("minilm-l6", "mpnet-base-v2", "smollm2-135m", "gemma3-270m")  # the real models whose size the page gives
DECODERS = ("smollm2-135m", "gemma3-270m")  # the quantised real decoders the page checks
# the two widths of this page's models: BERT-base's and MiniLM's
WIDTHS = ("bert-base-uncased", "minilm-l6")


def glue_peaks(frame: pd.DataFrame, peaks: pd.DataFrame) -> None:
    """Glue the numbers under Figure 1 from the layer-wise ``frame`` and its per-model ``peaks``: the median content
    tokens per layer (``n_tokens``), what the bands rest on (``token_*``), the models (``n_models``), the highest and
    the lowest peak with their models (``top_peak*``, ``low_peak*``), the range of the peaks over the isotropic 95th
    percentile (``min_ratio``, ``max_ratio``), the models above it at every layer (``n_all_above``), and that
    percentile at the page's two widths (``d_base``, ``d_small``; ``q95_768``, ``q95_384``)."""
    report.glue("n_tokens", int(frame.loc[frame["layer"] == frame["layer"].min(), "n"].median()), "{:,}")
    glue_sample("token", frame)
    report.glue("n_models", frame["label"].nunique())
    top = glue_extremes("", frame, peaks)
    report.glue("top_peak_layer", int(top["layer"]))
    d_base, d_small = (registry.spec(m).config["hidden_size"] for m in WIDTHS)
    report.glue("d_base", d_base)
    report.glue("d_small", d_small)
    report.glue("q95_768", layerwise.null_q95([d_base])[0], "{:.3f}")
    report.glue("q95_384", layerwise.null_q95([d_small])[0], "{:.3f}")


def glue_extremes(prefix: str, frame: pd.DataFrame, peaks: pd.DataFrame, peak: str = "_peak") -> pd.Series:
    """Glue, each name starting with ``prefix``, the highest and the lowest peak of ``peaks`` with their models
    (``top_peak``, ``top_peak_model``, ``low_peak``, ``low_peak_model``; "_peak" is ``peak``), the range of the peaks
    over the isotropic 95th percentile (``min_ratio``, ``max_ratio``) and how many models of ``frame`` are above it at
    every layer (``n_all_above``): the Section 3 pages' sentences under their figures. Returns the top peak's row."""
    top = peaks.loc[peaks["mean_cosine"].idxmax()]
    low = peaks.loc[peaks["mean_cosine"].idxmin()]
    report.glue(f"{prefix}top{peak}", top["mean_cosine"], "{:.2f}")
    report.glue(f"{prefix}top{peak}_model", top["label"])
    report.glue(f"{prefix}low{peak}", low["mean_cosine"], "{:.2f}")
    report.glue(f"{prefix}low{peak}_model", low["label"])
    report.glue(f"{prefix}min_ratio", peaks["above_null"].min(), "{:.1f}")
    report.glue(f"{prefix}max_ratio", peaks["above_null"].max(), "{:.1f}")
    report.glue(f"{prefix}n_all_above", int((layerwise.share_above_null(frame) == 1).sum()))
    return top


def glue_series(frame: pd.DataFrame, trained) -> None:
    """Glue each model of ``SERIES`` layer by layer (``glue_model_series``), the self-trained runs ``trained``
    (their refs) in one sentence (``selftrained_text``) and the true size of each model of ``SIZED``
    (``size_<name>``)."""
    for key, label in SERIES:
        glue_model_series(key, frame, label)
    report.glue("selftrained_text", series_sentences(frame, [t.label for t in trained]))
    for name in SIZED:
        report.glue(f"size_{name.split('-')[0]}", report.model_size(name))


def peaks_table(peaks: pd.DataFrame):
    """The per-model peaks as the page's table: model, layer and value of the peak, d, the isotropic q95 and their
    ratio."""
    table = peaks.drop(columns="model").assign(ratio=peaks["above_null"]).rename(columns={
        "label": "model", "layer": "layer of the peak", "mean_cosine": "peak mean cosine", "dim": "d",
        "null_q95": "isotropic q95", "ratio": "peak / q95"})
    return table[["model", "layer of the peak", "peak mean cosine", "d", "isotropic q95", "peak / q95"]].style.format(
        {"peak mean cosine": "{:.3f}", "isotropic q95": "{:.3f}", "peak / q95": "{:.1f}"}).hide(axis="index")


def checked(decoders: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``models.checks.decoder_checks`` whose decoder was checked here."""
    return decoders[decoders["status"] == "checked"] if len(decoders) else decoders


def glue_decoders(rows: pd.DataFrame) -> None:
    """Glue, for each decoder of ``DECODERS``, whether it learnt (``<name>_learnt``: ``claims.learnt``'s words) and
    its checks' numbers (``<name>_perplexity``, ...) from its row of ``rows`` (``checked``), or that it was not
    measured under this profile."""
    by_model = {row["model"]: row for _, row in rows.iterrows()}
    for name in DECODERS:
        row = by_model.get(name)
        report.glue(f"{name.split('-')[0]}_learnt", "not measured under this profile" if row is None else
                    learnt.learnt_words(registry.spec(name).display, row["nats"], row["nats_unigram"]))
        report.glue_fields(name.split("-")[0], row, {
            "perplexity": "{:.1f}", "perplexity_unigram": "{:,.0f}", "perplexity_untrained": "{:,.0f}",
            "weights_max_abs": "{:.1e}", "tensors": "{:d}", "tokens": "{:,}", "quantisation": "{}"})


def glue_quantisation(quant: pd.DataFrame | None) -> None:
    """Glue what quantising a float model to each of ``checks.QUANTISABLE_TYPES`` does (``quant``:
    ``models.checks.quantisation_effect``, or None when not measured): the weights' relative RMS change in percent
    (``q_<type>_rms``), the largest change of any layer's mean cosine and sigma_1 share (``_dcos``, ``_ds1``), and the
    float model's range of mean cosines over its layers (``q_minilm_range``)."""
    worst = None if quant is None else quant[quant["type"] != "F32"].groupby("type").agg(
        rms=("weights_rel_rms", lambda v: 100 * v.iloc[0]), dcos=("d_mean_cosine", lambda v: v.abs().max()),
        ds1=("d_sigma1_share", lambda v: v.abs().max()))
    for qtype in checks.QUANTISABLE_TYPES:
        report.glue_fields(f"q_{qtype}", None if worst is None else worst.loc[qtype],
                           {"rms": "{:.1f}", "dcos": "{:.4f}", "ds1": "{:.4f}"})
    base = None if quant is None else quant.loc[quant["type"] == "F32", "mean_cosine"]
    report.glue_fields("q_minilm", None if base is None else {"range": f"{base.min():.2f} to {base.max():.2f}"},
                       {"range": "{}"})


def decoders_table(rows: pd.DataFrame):
    """The checked decoders (``checked``) as the page's table: tensors, the largest difference from the ``gguf``
    package's dequantisation, prose tokens and the three perplexities."""
    return rows.reindex(columns=["model", "tensors", "weights_max_abs", "tokens", "perplexity", "perplexity_unigram",
                                 "perplexity_untrained"]).rename(columns={
        "weights_max_abs": "max |weight - gguf's dequantisation|", "tokens": "prose tokens",
        "perplexity_unigram": "perplexity, unigram model", "perplexity_untrained": "perplexity, untrained twin"}
    ).style.format({"perplexity": "{:.1f}", "perplexity, unigram model": "{:,.0f}",
                    "perplexity, untrained twin": "{:,.0f}"}).hide(axis="index")


# ---- the wording the Section 3 pages share ------------------------------------------------------------------------

def glue_model_series(prefix: str, frame: pd.DataFrame, label: str, digits: int = 2,
                      absent: str = "not measured under this profile") -> None:
    """Glue ``<prefix>_first``, ``_max`` (with its layer), ``_last`` and ``_max_value`` of the mean cosine of the
    model ``label`` in the layer-wise ``frame`` for the narrative, or ``absent`` for each when the model is not in
    ``frame`` (so the page builds under any profile)."""
    values = layerwise.layer_series(frame, label)
    fmt = f"{{:.{digits}f}}"
    texts = {"first": absent, "last": absent, "max": absent, "max_value": absent}
    if values is not None:
        texts = {"first": f"{values.iloc[0]:.3f}", "last": fmt.format(values.iloc[-1]),
                 "max": f"{fmt.format(values.max())} (layer {values.idxmax()})", "max_value": fmt.format(values.max())}
    for key, text in texts.items():
        report.glue(f"{prefix}_{key}", text)


def series_sentences(frame: pd.DataFrame, labels: Sequence[str], absent: str = "none under this profile") -> str:
    """"<label>: <first> at layer <l0>, at most <max> (layer <l>), <last> at the last layer; ..." for the narrative."""
    parts = []
    for label in labels:
        v = layerwise.layer_series(frame, label)
        if v is not None:
            parts.append(f"{label}: {v.iloc[0]:.2f} at layer {v.index[0]}, at most {v.max():.2f} (layer "
                         f"{v.idxmax()}), {v.iloc[-1]:.2f} at the last layer")
    return "; ".join(parts) if parts else absent


def glue_sample(prefix: str, frame: pd.DataFrame) -> None:
    """Glue what a figure's bands rest on: ``<prefix>_examples`` (the most examples any model read: texts, clips or
    images), ``<prefix>_min_vectors`` (the fewest vectors in any layer of any model), ``<prefix>_n_boot`` and
    ``<prefix>_level`` (the bootstrap's resamples and confidence level, ``experiments.layerwise.BOOTSTRAP``)."""
    has = len(frame) and "n_examples" in frame
    report.glue(f"{prefix}_examples", int(frame["n_examples"].max()) if has else 0, "{:,}")
    report.glue(f"{prefix}_min_vectors", int(frame["n"].min()) if len(frame) else 0, "{:,}")
    report.glue(f"{prefix}_n_boot", layerwise.BOOTSTRAP["n_boot"], "{:,}")
    report.glue(f"{prefix}_level", f"{100 * layerwise.BOOTSTRAP['level']:.0f}%")


def not_measured(skipped, missing_suites) -> str:
    """The models requested but not measured here, with why (``layerwise.Skipped`` rows, then the self-trained
    suites that were missing), or "none"."""
    notes = [f"{s.ref.name} ({s.ref.variant}): {s.reason}" for s in skipped] + list(missing_suites)
    return "; ".join(notes) if notes else "none"


# ---- what the page asks of a runtime (``chapters.plans``) -------------------------------------------------------------

def examples(p: dict, model: str, n: int) -> int:
    """The examples a Section 3 page with parameters ``p`` gives ``model``: ``n``, unless ``per_model`` sets its
    own."""
    return int((p.get("per_model") or {}).get(model, {}).get("n", n))


def plan(p: dict, out: budget.Plan) -> None:
    """Every model of ``models`` (pretrained, or with random weights at true size when ``variant`` is "untrained":
    nothing downloaded) and of ``pretrained`` on ``n_samples`` texts of ``max_length`` tokens (``per_model`` may
    change a model's count), read ``batch_size`` at a time, one sum of unit vectors per text and layer
    (``experiments.layerwise.FirstMoments``)."""
    variant = p["variant"] if p["variant"] in ("pretrained", "untrained") else None  # tiny models: toy sizes
    names = [(m, variant) for m in p["models"] if variant] + [(m, "pretrained") for m in p.get("pretrained", [])]
    out.checkpoints += [budget.Checkpoint(m, None, examples(p, m, p["n_samples"]), p["max_length"],
                                          batch=p.get("batch_size", 8), per_example=True, variant=v,
                                          on_cpu=p.get("device") == "cpu",
                                          sized_by=("n_samples", "batch_size", "max_length")) for m, v in names]
    out.data.append((p["source"], p["n_samples"]))
