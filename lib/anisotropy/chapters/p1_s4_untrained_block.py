"""The untrained-block page (Paper 1, Section 4): what it asks of a runtime."""

from __future__ import annotations

import inspect

from anisotropy.experiments import block
from anisotropy.measure import taps
from anisotropy.pages import budget

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
