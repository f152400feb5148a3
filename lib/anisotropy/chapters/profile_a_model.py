"""The profile page (``python -m anisotropy profile`` shown on the book's models): its models, its per-model numbers
and the command line in words, all read from ``experiments.model_profile``'s table, and what it asks of a runtime."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd

from anisotropy.experiments import layerwise, model_profile
from anisotropy.measure import batches
from anisotropy.models import registry
from anisotropy.pages import budget


def describe(models, variant: str = "pretrained") -> list[str]:
    """One provenance line per model: a registry model's (``experiments.layerwise.describe``), else what was given
    (a folder, a file or a Hub id outside the registry)."""
    lines = []
    for m in models:
        if registry.known(m):
            lines.append(layerwise.describe(layerwise.ModelRef(registry.spec(m).name, variant)))
        else:
            kind = "a .gguf file" if str(m).endswith(".gguf") else "a folder" if Path(m).is_dir() else "a Hub id"
            lines.append(f"{m}: {kind}, as given")
    return lines


def command(models, variant: str = "pretrained", text: str = "", source: str = "prose", n: int | None = None,
            max_length: int = 128, device: str = "auto", dtype: str | None = None, out: str = "profile-out") -> str:
    """The ``python -m anisotropy profile`` line that measures what the page measured (flags at their defaults are
    left out)."""
    args = ["python", "-m", "anisotropy", "profile", *map(str, models)]
    args += ["--text", text] if text else ["--source", source] if source != "prose" else []
    args += ["--n", str(n)] if n else []
    args += ["--max-length", str(max_length)] if max_length != 128 else []
    args += ["--device", device] if device != "auto" else []
    args += ["--dtype", dtype] if dtype and dtype != "float32" else []
    args += ["--variant", variant] if variant != "pretrained" else []
    return shlex.join([*args, "--out", out])


def key_numbers(table: pd.DataFrame) -> pd.DataFrame:
    """One row per model of the profile table: its kind, blocks (the last layer's index; layer 0 is the input of
    the first block) and width, the vectors of its thinnest layer and
    Paper 2's batching, the largest mean cosine (and its ratio to the isotropic 95th percentile) and the largest
    sigma_1 share with the relative depths where they are, and the TwoNN dimension's range over layers."""
    rows = []
    for label, part in table.groupby("label", sort=False):
        cos = part.loc[part["mean_cosine"].idxmax()]
        share = part.loc[part["sigma1_share"].idxmax()]
        rows.append({"model": label, "kind": part["stack"].iloc[0], "blocks": int(part["layer"].max()),
                     "width": int(part["dim"].max()), "vectors": int(part["n"].min()),
                     "batches": f"{int(part['spectral_n_batches'].iloc[0])} × {int(part['spectral_batch_size'].iloc[0]):,}",
                     "max mean cosine": float(cos["mean_cosine"]), "cosine at depth": float(cos["relative_depth"]),
                     "× null": float(cos["ratio_to_null"]), "max σ₁ share": float(share["sigma1_share"]),
                     "σ₁ at depth": float(share["relative_depth"]),
                     "TwoNN": f"{part['twonn_dimension'].min():.1f}–{part['twonn_dimension'].max():.1f}"})
    return pd.DataFrame(rows)


def findings(numbers: pd.DataFrame) -> str:
    """``key_numbers`` in one sentence per model."""
    return " ".join(
        f"{r['model']} ({r['kind']}, {r['blocks']} blocks, d = {r['width']}): its mean cosine reaches "
        f"{r['max mean cosine']:.2f} at relative depth {r['cosine at depth']:.2f}, {r['× null']:.1f} times the isotropic "
        f"95th percentile at its width; its σ₁ share peaks at {r['max σ₁ share']:.2f} at depth {r['σ₁ at depth']:.2f}; "
        f"its TwoNN dimension spans {r['TwoNN']} over its layers." for _, r in numbers.iterrows())


def plan(p: dict, out: budget.Plan) -> None:
    """The profile command's measurement (``experiments.model_profile``): every token vector summed per example for
    Paper 1's interval and pooled for Paper 2's batches, at most ``N_BATCHES`` of ``BATCH_SIZE`` per state, measured
    with ``PAPER2_METRICS``, ``EXTRACTION_BATCH`` texts at a time. A model outside the registry (a folder, a file,
    another Hub id) has no size to count: a note says so; random weights at true size ("untrained") download
    nothing, toy-size ones ("tiny") are not counted."""
    variant = p.get("variant", "pretrained")
    if variant not in ("pretrained", "untrained"):
        return
    host = dict(pool=batches.BATCH_SIZE * model_profile.N_BATCHES, metric_batch=batches.BATCH_SIZE, per_example=True,
                metrics=model_profile.PAPER2_METRICS, variant=variant, on_cpu=p.get("device") == "cpu",
                sized_by=("n", "max_length"))
    known = [registry.spec(m).name for m in p["models"] if registry.known(m)]
    positions = p["max_length"] if p.get("text") else budget.text_positions(p["source"], p["max_length"])
    out.checkpoints += [budget.Checkpoint(m, None, p["n"], positions, p.get("dtype") or "float32",
                                          model_profile.EXTRACTION_BATCH, **host) for m in known]
    out.notes += [f"{m} is not in the registry: its size is not counted" for m in p["models"] if not registry.known(m)]
    if not p.get("text"):
        out.data.append((p["source"], p["n"]))
