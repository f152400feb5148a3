"""The drift page (Paper 1, Section 3): its correlations of mean cosine and drift across layers in words and table
rows, and what it asks of a runtime."""

from __future__ import annotations

import dataclasses

import pandas as pd

from anisotropy.chapters import plans
from anisotropy.experiments import layerwise
from anisotropy.measure import statistics
from anisotropy.pages import budget, report

METHODS = ("spearman", "pearson")  # the two correlations the page reads, as ``layerwise.drift_correlations`` names them


def glue_significance(corr: pd.DataFrame, alpha: float) -> None:
    """Glue, for each of ``METHODS``, the models whose correlation (``corr``: ``layerwise.drift_correlations``) has
    a p-value below ``alpha`` and those whose has not (``n_sig_<method>``, ``sig_<method>_models``,
    ``notsig_<method>_models``, ``n_neg_sig_<method>``: the significant ones that are negative); the models with a
    p-value (``n_corr_models``) and their fewest and most layers; and what an exact Spearman test can reach
    (``max_exact_layers``, the p-values of 4 and 5 layers in order, ``min_sig_layers`` at ``alpha``)."""
    valid = corr.dropna(subset=["spearman_p"])
    for method in METHODS:
        sig = valid[valid[f"{method}_p"] < alpha]
        report.glue(f"n_sig_{method}", len(sig))
        report.glue(f"sig_{method}_models", ", ".join(sig["label"]) if len(sig) else "none")
        notsig = valid[valid[f"{method}_p"] >= alpha]
        report.glue(f"notsig_{method}_models", ", ".join(notsig["label"]) if len(notsig) else "none")
        report.glue(f"n_neg_sig_{method}", int((sig[method] < 0).sum()))
    report.glue("n_corr_models", len(valid))
    report.glue("max_exact_layers", statistics.EXACT_SPEARMAN_MAX_N)
    report.glue("exact_p4", statistics.layer_correlation(range(4), range(4)).spearman_p, "{:.3f}")
    report.glue("exact_p5", statistics.layer_correlation(range(5), range(5)).spearman_p, "{:.3f}")
    report.glue("min_sig_layers", statistics.min_significant_layers(alpha))
    report.glue("alpha", alpha)
    report.glue("min_layers", int(valid["n_layers"].min()) if len(valid) else 0)
    report.glue("max_layers", int(valid["n_layers"].max()) if len(valid) else 0)


def glue_models(corr: pd.DataFrame, variant: str, alpha: float) -> None:
    """Glue each real pretrained model's two correlations in words (``real_drift``, ``n_real``); how many of the
    models measured in ``variant`` (CNNs apart) have a positive Spearman correlation with a p-value below ``alpha``
    (``n_random_tr``, ``n_random_tr_pos``) and those that do not, in words (``random_tr_not``); and the CNNs' layers
    (``cnn_layers``)."""
    real = corr[corr["variant"] == "pretrained"]
    report.glue("real_drift", "; ".join(
        f"{r.label}: Spearman ρ = {r.spearman:+.2f} (p = {r.spearman_p:.2g}), Pearson r = {r.pearson:+.2f} "
        f"(p = {r.pearson_p:.2g}) over {r.n_layers} layers" for r in real.itertuples()) or "none under this profile")
    report.glue("n_real", len(real))
    random_tr = corr[(corr["variant"] == variant) & (corr["family"] != "cnn")].dropna(subset=["spearman_p"])
    positive = (random_tr["spearman_p"] < alpha) & (random_tr["spearman"] > 0)
    report.glue("n_random_tr", len(random_tr))
    report.glue("n_random_tr_pos", int(positive.sum()))
    report.glue("random_tr_not", "; ".join(f"{r.label}: ρ = {r.spearman:+.2f}, p = {r.spearman_p:.2g}, "
                                           f"{r.n_layers} layers" for r in random_tr[~positive].itertuples()) or "none")
    cnn_rows = corr[corr["family"] == "cnn"]
    report.glue("cnn_layers", ", ".join(f"{r.label} {r.n_layers}" for r in cnn_rows.itertuples()) or "none")


def table(corr: pd.DataFrame):
    """The correlations ``corr`` as the page's table: family, model, layers, and each correlation with its p-value."""
    columns = {"family name": "family", "label": "model", "n_layers": "layers", "spearman": "Spearman ρ",
               "spearman_p": "p (Spearman)", "pearson": "Pearson r", "pearson_p": "p (Pearson)"}
    shown = corr.assign(**{"family name": corr["family"].map(layerwise.FAMILY_NAMES)})
    return shown[list(columns)].rename(columns=columns).style.format(
        {"Spearman ρ": "{:+.2f}", "p (Spearman)": "{:.2g}", "Pearson r": "{:+.2f}", "p (Pearson)": "{:.2g}"}).hide(
        axis="index")


def plan(p: dict, out: budget.Plan) -> None:
    """The models of the three Section 3 pages with their parameters (the profiles give both the same values, through
    YAML anchors): when those pages ran in this runtime the drift page reads their stored measurements and loads
    nothing (``Checkpoint.reused_from``); on a fresh runtime (an empty store) it measures every one of them itself."""
    common = dict(variant=p["variant"], batch_size=p["batch_size"], device=p.get("device"))
    parts = {
        "p1_s3_token_level": dict(common, models=p["token_models"], pretrained=p.get("pretrained", []),
                                  source=p["text_source"], n_samples=p["n_texts"], max_length=p["token_max_length"]),
        "p1_s3_character_level": dict(common, models=p["char_models"], pretrained=p.get("pretrained_char", []),
                                      source=p["text_source"], n_samples=p["n_char_texts"],
                                      max_length=p["char_max_length"], per_model=p.get("char_per_model") or {}),
        "p1_s3_modalities": dict(common, speech_models=p["speech_models"], vit_models=p["vit_models"],
                                 cnn_models=p["cnn_models"], speech_source=p["speech_source"],
                                 n_speech=p["n_speech"], image_source=p["image_source"], n_images=p["n_images"],
                                 per_model=p.get("per_model") or {}),
    }
    for chapter, params in parts.items():
        part = plans.plan(chapter, params, out.profile)
        names = {"n_samples": "n_char_texts" if chapter == "p1_s3_character_level" else "n_texts",
                 "max_length": "char_max_length" if chapter == "p1_s3_character_level" else "token_max_length"}
        out.checkpoints += [dataclasses.replace(c, reused_from=chapter,
                                                sized_by=tuple(names.get(k, k) for k in c.sized_by))
                            for c in part.checkpoints]
        out.data += part.data
    out.notes.append("reuses the measurements the three Section 3 chapters stored (same models, same data) when they "
                     "ran in this runtime; the estimates are a fresh runtime's, which measures them all")
