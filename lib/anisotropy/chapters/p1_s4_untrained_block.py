"""The untrained-block page (Paper 1, Section 4): the sweep of the drift norm N through one untrained block, its scores,
queries and keys, softmax rows and entropy, the pre-LayerNorm block and the trained reference in words and table rows,
and what it asks of a runtime.

The functions read the page's frames: ``frame`` (``experiments.block.sweep``, one row per variant, seed and N),
``fixed`` (``experiments.block.fixed_points``, N* per variant and seed), ``scores`` (``block.score_samples``), ``zero``
(``block.inputs_at_zero``) and ``reference`` (``block.reference_norms``)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pandas as pd

from anisotropy.claims import ledger
from anisotropy.claims.rules import p1_s4
from anisotropy.experiments import block
from anisotropy.measure import baseline, taps
from anisotropy.pages import budget, report

WIDTH = 768  # the block's width d (BERT-base's hidden size)


def _at(frame: pd.DataFrame, norm: float) -> pd.DataFrame:
    """Per variant, the mean over seeds of every column of ``frame`` at drift norm ``norm``."""
    return frame[frame["bias_norm"] == norm].groupby("variant").mean(numeric_only=True)


def _post(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["variant"] == "post_ln"]


def n_star(fixed: pd.DataFrame) -> float:
    """The post-LayerNorm block's fixed point N*, the mean over seeds (``fixed``: ``block.fixed_points``)."""
    return fixed.loc[fixed["variant"] == "post_ln", "n_star"].mean()


def glue_input_output(frame: pd.DataFrame, fixed: pd.DataFrame, fixed_average: pd.DataFrame, n_seeds: int,
                      n_sequences: int, seq_len: int, n_rows: int) -> None:
    """Glue the numbers of the input-output figure: the post-LN block's fixed point N* per seed (``n_star*``, from the
    mean drift; ``n_star_avg*``, from the average one, ``fixed_average``) against its prediction, the output drift at
    N = 0, 0.5 and the largest N, the token and output norms, the input and output mean cosines at small N, and the
    run's size (``n_seeds``, ``shape``: ``n_sequences`` x ``seq_len``, ``n_rows`` query positions)."""
    post, at_zero, at_max = _post(frame), _at(frame, 0), _at(frame, frame["bias_norm"].max())
    star = fixed[fixed["variant"] == "post_ln"]
    star_average = fixed_average[fixed_average["variant"] == "post_ln"]
    report.glue("n_star_avg", star_average["n_star"].mean(), "{:.2f}")
    report.glue("n_star_avg_min", star_average["n_star"].min(), "{:.2f}")
    report.glue("n_star_avg_max", star_average["n_star"].max(), "{:.2f}")
    report.glue("avg_out_zero", at_zero.loc["post_ln", "output_drift_norm"], "{:.2f}")
    report.glue("avg_out_max", at_max.loc["post_ln", "output_drift_norm"], "{:.2f}")
    report.glue("avg_out_half", block.interpolate(post, "output_drift_norm", 0.5)["output_drift_norm"].mean(), "{:.2f}")
    report.glue("n_seeds", n_seeds)
    report.glue("shape", f"{n_sequences} × {seq_len}")
    report.glue("n_sequences", n_sequences)
    report.glue("seq_len", seq_len)
    report.glue("n_rows", min(n_rows, seq_len))
    report.glue("n_star", star["n_star"].mean(), "{:.3f}")
    report.glue("n_star_sd", star["n_star"].std(ddof=1) if len(star) > 1 else 0.0, "{:.1e}")
    report.glue("n_star_min", star["n_star"].min(), "{:.4f}")
    report.glue("n_star_max", star["n_star"].max(), "{:.4f}")
    report.glue("n_star_pred", star["predicted_n_star"].mean(), "{:.3f}")
    report.glue("n_star_diff", (star["n_star"] - star["predicted_n_star"]).abs().max(), "{:.1e}")
    report.glue("sqrt_d", math.sqrt(WIDTH), "{:.2f}")
    report.glue("token_norm", float(post.loc[post["bias_norm"] == 0, "input_norm"].mean()), "{:.3f}")
    report.glue("out_norm", post["output_norm"].mean(), "{:.4f}")
    report.glue("out_norm_spread", post["output_norm"].max() - post["output_norm"].min(), "{:.1e}")
    report.glue("out_cos_zero", at_zero.loc["post_ln", "output_cosine"], "{:.3f}")
    report.glue("in_cos_zero", at_zero.loc["post_ln", "input_cosine"], "{:.4f}")
    report.glue("in_cos_4", block.interpolate(post, "input_cosine", 4.0)["input_cosine"].mean(), "{:.3f}")
    report.glue("in_cos_half", block.interpolate(post, "input_cosine", 0.5)["input_cosine"].mean(), "{:.3f}")
    report.glue("out_cos_half", block.interpolate(post, "output_cosine", 0.5)["output_cosine"].mean(), "{:.3f}")


def glue_scores(frame: pd.DataFrame, fixed: pd.DataFrame, scores: pd.DataFrame, histogram_norms,
                n_score_samples: int) -> None:
    """Glue what the score figures show: the heads whose mean score falls at the largest N of the histograms
    (``scores``), the shift of the block's mean score per seed where the ledger's row reads it (the largest grid norm
    within the claim's range of N*, ``claims.rules.p1_s4.regime_top``) and whether its sign differs between seeds, in
    words, and the spread of a score row at N* and at the largest N."""
    post, at_max = _post(frame), _at(frame, frame["bias_norm"].max())
    star = n_star(fixed)
    shift_params = ledger.claim("p1-s4-other-inits-increase").params
    n_shift = p1_s4.regime_top(frame, shift_params["variant"], shift_params["within"])
    per_seed = post[post["bias_norm"] == n_shift].sort_values("seed")
    report.glue("n_shift", f"{n_shift:g} ({n_shift / star:.1f} N*)" if np.isfinite(n_shift) else "no grid norm")
    report.glue("n_shift_within", f"{shift_params['within']:g}")
    report.glue("n_max", frame["bias_norm"].max(), "{:g}")
    report.glue("n_score_samples", n_score_samples)
    head_means = scores[scores["bias_norm"] == max(histogram_norms)].groupby("head")["score"].mean()
    report.glue("n_heads", len(head_means))
    report.glue("heads_down", int((head_means < 0).sum()))
    report.glue("hist_n_max", max(histogram_norms), "{:g}")
    at_zero_seed = post[post["bias_norm"] == 0].set_index("seed")["score_mean"]
    shift = per_seed.set_index("seed")["score_mean"] - at_zero_seed
    report.glue("score_shift_list", ", ".join(f"{v:+.3g}" for v in shift) or "not on the grid")
    mixed = shift.gt(0).nunique() > 1
    report.glue("shift_phrase", "its sign differs between seeds" if mixed else "all seeds of this run happen to shift "
                "it the same way")
    report.glue("shift_summary", "it differs between heads and, for the block's mean score, between seeds" if mixed
                else "it differs between heads; the block's mean score happens to shift the same way in every seed of "
                     "this run")
    report.glue("score_row_std_max", at_max.loc["post_ln", "score_row_std"], "{:.2f}")
    report.glue("score_row_std_star", block.interpolate(post, "score_row_std", star)["score_row_std"].mean(), "{:.4f}")


def glue_queries(frame: pd.DataFrame, fixed: pd.DataFrame, zero: pd.DataFrame) -> None:
    """Glue the queries' and keys' geometry: the queries' mean cosine at N*, their norm and mean cosine at N = 0 and
    their norm at the largest N; and, at N = 0, the inputs', queries' and keys' mean cosines of the block fed BERT's
    whole embedding layer (``zero_full_*``) and the rows of E alone (``zero_word_qk``), over ``n_seeds_zero`` seeds."""
    post, at_zero, at_max = _post(frame), _at(frame, 0), _at(frame, frame["bias_norm"].max())
    report.glue("q_cos_star", block.interpolate(post, "query_cosine", n_star(fixed))["query_cosine"].mean(), "{:.4f}")
    report.glue("q_norm_zero", at_zero.loc["post_ln", "query_norm"], "{:.3f}")
    report.glue("q_cos_zero", at_zero.loc["post_ln", "query_cosine"], "{:.1e}")
    report.glue("q_norm_max", at_max.loc["post_ln", "query_norm"], "{:.0f}")
    at_zero_inputs = zero.groupby("inputs")[["input_cosine", "query_cosine", "key_cosine"]].mean()
    full, word = at_zero_inputs.loc[block.FULL_EMBEDDINGS], at_zero_inputs.loc[block.WORD_ONLY]
    report.glue("zero_full_input", full["input_cosine"], "{:.2f}")
    report.glue("zero_full_qk", f"{full['query_cosine']:.2f} and {full['key_cosine']:.2f}")
    report.glue("zero_word_qk", f"{word['query_cosine']:.1e} and {word['key_cosine']:.1e}")
    report.glue("n_seeds_zero", zero["seed"].nunique())


def zero_table(zero: pd.DataFrame):
    """Section 4.3 at N = 0: the two inputs of the same untrained block (``zero``), mean over seeds, beside the
    isotropic q95 of the block's width, as the page's table."""
    table = zero.groupby("inputs", sort=False)[["input_cosine", "query_cosine", "key_cosine"]].mean()
    table[f"isotropic q95 (d = {WIDTH})"] = float(baseline.isotropic_cosine_quantile(0.95, WIDTH))
    return table.rename_axis("block fed, at N = 0").rename(columns={
        "input_cosine": "inputs' mean cosine", "query_cosine": "queries' mean cosine",
        "key_cosine": "keys' mean cosine"}).style.format("{:.2g}")


def glue_rows(frame: pd.DataFrame, fixed: pd.DataFrame, seq_len: int) -> None:
    """Glue the softmax rows' numbers: a uniform row's weight (1 / ``seq_len``), the largest and smallest weight of a
    row and of a sequence at the largest N, and the largest weight of a row at N*."""
    post, at_max = _post(frame), _at(frame, frame["bias_norm"].max())
    report.glue("uniform", 1 / seq_len, "{:.5f}")
    report.glue("row_max_max", at_max.loc["post_ln", "softmax_max"], "{:.4f}")
    report.glue("row_min_max", at_max.loc["post_ln", "softmax_min"], "{:.2e}")
    report.glue("seq_max_max", at_max.loc["post_ln", "seq_max"], "{:.3f}")
    report.glue("row_max_star", block.interpolate(post, "softmax_max", n_star(fixed))["softmax_max"].mean(), "{:.5f}")


def glue_entropy(frame: pd.DataFrame, fixed: pd.DataFrame) -> None:
    """Glue the attention entropy's numbers: the N where the entropy ratio falls below 0.99 (``onset``, and in units
    of N*), how far below 1 it is at N*, and its value at the largest N."""
    post, at_max, star = _post(frame), _at(frame, frame["bias_norm"].max()), n_star(fixed)
    onset = block.threshold_norm(frame, "entropy_ratio", 0.99)
    post_onset = onset.loc[onset["variant"] == "post_ln", "bias_norm"]
    report.glue("onset", post_onset.mean(), "{:.0f}")
    report.glue("onset_ratio", post_onset.mean() / star, "{:.0f}")
    report.glue("entropy_star", 1 - block.interpolate(post, "entropy_ratio", star)["entropy_ratio"].mean(), "{:.1e}")
    report.glue("entropy_max", at_max.loc["post_ln", "entropy_ratio"], "{:.3f}")


def glue_pre_ln(frame: pd.DataFrame, fixed: pd.DataFrame, variants) -> None:
    """Glue the pre-LayerNorm block's numbers against the post-LN one's: its crossings of output = input, the gap of
    output over input norm at the largest N, its output norm and cosines at small N, its queries' norms, its entropy
    ratio at N = 0 and the largest N and which way it moves, in words (``pre_entropy_phrase``); and GPT-2's block in
    one sentence when ``variants`` has it (``gpt2_text``)."""
    n_max = frame["bias_norm"].max()
    at_zero, at_max = _at(frame, 0), _at(frame, n_max)
    pre = frame[frame["variant"] == "pre_ln"]
    pre_star = fixed.loc[fixed["variant"] == "pre_ln", "n_star"]
    pre_gap = (pre["output_norm"] - pre["input_norm"])[pre["bias_norm"] == n_max]
    report.glue("pre_crossings", int(pre_star.notna().sum()))
    report.glue("pre_gap_lo", pre_gap.min(), "{:+.2f}")
    report.glue("pre_gap_hi", pre_gap.max(), "{:+.2f}")
    report.glue("pre_out_zero", at_zero.loc["pre_ln", "output_norm"], "{:.2f}")
    report.glue("pre_cos_quarter", block.interpolate(pre, "output_cosine", 0.25)["output_cosine"].mean(), "{:.2f}")
    report.glue("in_cos_quarter", block.interpolate(pre, "input_cosine", 0.25)["input_cosine"].mean(), "{:.2f}")
    report.glue("pre_q_norm", pre["query_norm"].mean(), "{:.1f}")
    report.glue("pre_q_norm_var", (pre["query_norm"].max() - pre["query_norm"].min()) / pre["query_norm"].mean(),
                "{:.1%}")
    report.glue("pre_entropy_zero", at_zero.loc["pre_ln", "entropy_ratio"], "{:.4f}")
    report.glue("pre_entropy_max", at_max.loc["pre_ln", "entropy_ratio"], "{:.6f}")
    report.glue("pre_entropy_phrase", "more uniform as the drift grows" if at_max.loc["pre_ln", "entropy_ratio"]
                > at_zero.loc["pre_ln", "entropy_ratio"] else "no more uniform as the drift grows")
    if "gpt2" in variants:
        e0, e1 = at_zero.loc["gpt2", "entropy_ratio"], at_max.loc["gpt2", "entropy_ratio"]
        gap = abs(at_max.loc["gpt2", "output_norm"] / at_max.loc["gpt2", "input_norm"] - 1)
        gpt_text = (f"The causal GPT-2 block (GPT-2's own initialiser) has entropy ratio {e0:.4f} at N = 0 and "
                    f"{e1:.6f} at N = {n_max:g} ({'more uniform' if e1 > e0 else 'sharper'} with the drift), and its "
                    f"output norm is within {gap:.1e} of the input norm at the largest N.")
    else:
        gpt_text = "(The paper profile adds GPT-2's own block, causal and pre-LN, to this comparison.)"
    report.glue("gpt2_text", gpt_text)


def glue_reference(reference: pd.DataFrame, fixed: pd.DataFrame, reference_models, reference_texts: int) -> None:
    """Glue the trained reference's numbers (``reference``, the first of ``reference_models``, on
    ``reference_texts`` texts): its width and √d, its hidden states' mean, drift and LayerNorm-output norms per layer,
    their smallest ratio and its layer, whether its mean norms stay below N* scaled to its width (``ref_below``) and
    whether its LayerNorm gains are below one (``ref_gain_phrase``), in words; and the other reference models in one
    sentence (``ref_others``)."""
    first = reference[reference["model"] == reference_models[0]]
    root = np.sqrt(first["hidden_size"].iloc[0])
    report.glue("ref_name", first["label"].iloc[0])
    report.glue("ref_width", int(first["hidden_size"].iloc[0]))
    report.glue("ref_sqrt_d", root, "{:.1f}")
    report.glue("ref_norm_lo", first["mean_norm"].min(), "{:.1f}")
    report.glue("ref_norm_hi", first["mean_norm"].max(), "{:.1f}")
    report.glue("ref_drift_lo", first["drift_norm"].min(), "{:.1f}")
    report.glue("ref_drift_hi", first["drift_norm"].max(), "{:.1f}")
    report.glue("ref_drift_rel", first["drift_norm"].max() / root, "{:.2f}")
    report.glue("ref_ln_lo", first["layer_norm_norm"].min(), "{:.1f}")
    report.glue("ref_ln_hi", first["layer_norm_norm"].max(), "{:.1f}")
    report.glue("ref_texts", reference_texts)
    ratio = first["mean_norm"] / first["layer_norm_norm"]
    report.glue("ref_ln_ratio", ratio.min(), "{:.2f}")
    report.glue("ref_ln_ratio_layer", int(first.loc[ratio.idxmin(), "layer"]))
    below = first["mean_norm"].max() < n_star(fixed) * root / math.sqrt(WIDTH)
    report.glue("ref_below", "below" if below else "not below")
    report.glue("ref_gain_phrase", "smaller than one on average" if first["layer_norm_norm"].max() < root else
                "not uniformly smaller than one")
    others = []
    for name, sub in reference.groupby("model", sort=False):
        if name == reference_models[0]:
            continue
        r = math.sqrt(sub["hidden_size"].iloc[0])
        others.append(f"{sub['label'].iloc[0]}: mean norms {sub['mean_norm'].min() / r:.2f} to "
                      f"{sub['mean_norm'].max() / r:.2f} √d, drift norms {sub['drift_norm'].min() / r:.2f} to "
                      f"{sub['drift_norm'].max() / r:.2f} √d")
    report.glue("ref_others", ("Other models of this profile: " + "; ".join(others) + ".") if others else
                "(The paper profile adds bert-base-uncased, the model whose initialisation this page uses.)")

# One row of the score samples' frames (``experiments.block.score_samples``): the variant (a pointer to one str), the
# seed (int64), the bias norm (float64), the head (int16) and the score (float32).
SCORE_ROW_BYTES = 8 + 8 + 8 + 2 + 4


def block_shape() -> dict:
    """The block's sizes (``experiments.block.bert_config``: BERT-base's), d, heads and the MLP's width."""
    config = block.bert_config()
    return {"d": config.hidden_size, "heads": config.num_attention_heads, "intermediate": config.intermediate_size}


def forward_bytes(n_sequences: int, seq_len: int, n_rows: int, gpt2: bool = False) -> float:
    """Peak bytes of one forward of the block with its statistics (``experiments.block.block_statistics``), B =
    ``n_sequences`` sequences of S = ``seq_len`` tokens, in float32:

    - attention, eager: the scores and the probabilities the hooks keep, 2 x 4 x B x heads x S^2;
    - per token, as many d-wide float32 tensors as are alive at once: inputs, queries, keys, values, the attention
      output and projections, the MLP's product and activation (four d wide each), and the statistics' float64 unit
      vectors: 12 for BERT's blocks, 24 for GPT-2's (``gpt2``: its tanh GELU in five element-wise passes), x 4 d bytes;
    - the row statistics on ``n_rows`` query positions: the selected scores and probabilities, 2 x 4 x B x heads x
      R x S.

    Checked against torch's allocations at small sizes (tests/test_plan_measured.py: within 1.5x). Bytes."""
    s = block_shape()
    attention = 2 * 4.0 * n_sequences * s["heads"] * seq_len**2
    rows = 2 * 4.0 * n_sequences * s["heads"] * min(n_rows, seq_len) * seq_len
    return attention + 4.0 * n_sequences * seq_len * s["d"] * (24 if gpt2 else 12) + rows


def forward_flops(n_sequences: int, seq_len: int) -> float:
    """Flops of one forward of the block: its linear maps (4 d^2 + 2 d i a token, twice) and attention's two
    products (2 x 2 S d a token)."""
    s = block_shape()
    tokens = n_sequences * seq_len
    return 2.0 * tokens * (4 * s["d"] ** 2 + 2 * s["d"] * s["intermediate"]) + 4.0 * tokens * seq_len * s["d"]


def plan(p: dict, out: budget.Plan) -> None:
    """The block sweep (every seed, variant and bias norm: one forward each), the inputs at N = 0 (on the CPU), the
    score samples (one forward per histogram norm, ``n_score_samples`` per head kept in frames), on the page's
    ``device``; and the reference models whose hidden-state norms the page compares with
    (``experiments.block.reference_norms``, at its default batch size): ``reference_texts`` texts each, into
    ``taps.extract``'s own accumulator (a ``LayerStats`` per state with its default reservoir). Only pretrained
    references are downloaded."""
    on_cpu = p.get("device", "cpu") == "cpu"
    b, s, rows = p["n_sequences"], p["seq_len"], p["n_rows"]
    gpt2 = "gpt2" in p["variants"]
    forwards = p["n_seeds"] * len(p["variants"]) * len(p["bias_norms"])
    sizes = ("n_sequences", "seq_len")
    out.work.append(budget.Work("block sweep", device_bytes=forward_bytes(b, s, rows, gpt2),
                                device_flops=forwards * forward_flops(b, s), on_cpu=on_cpu,
                                sized_by=sizes + ("n_rows",)))
    out.work.append(budget.Work("inputs at N = 0", device_bytes=forward_bytes(b, s, rows),
                                device_flops=2 * p["n_seeds"] * forward_flops(b, s), on_cpu=True, sized_by=sizes))
    heads, norms = block_shape()["heads"], len(p["histogram_norms"])
    samples = p["n_score_samples"] * heads
    # per sample, on the device: four int64 indices and the float32 score
    out.work.append(budget.Work("score samples", host_bytes=2.0 * SCORE_ROW_BYTES * samples * norms,
                                device_bytes=forward_bytes(b, s, rows) + 36.0 * samples,
                                device_flops=norms * forward_flops(b, s), on_cpu=on_cpu,
                                sized_by=("n_score_samples",) + sizes))
    batch = inspect.signature(block.reference_norms).parameters["batch_size"].default
    reservoir = inspect.signature(taps.extract).parameters["reservoir_size"].default
    names = list(p["reference_models"]) if p["reference_variant"] == "pretrained" else []
    out.checkpoints += [budget.Checkpoint(m, None, p["reference_texts"], p["reference_max_length"], batch=batch,
                                          stats_reservoir=reservoir, on_cpu=on_cpu,
                                          sized_by=("reference_texts", "reference_max_length")) for m in names]
