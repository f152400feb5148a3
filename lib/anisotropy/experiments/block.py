"""Paper 1, Section 4: one untrained Transformer block under a common drift of its inputs.

Setup (as the paper): an embedding table E and one block T initialised as BERT-base (``BertConfig()`` defaults, the
library's own ``_init_weights``: weights N(0, 0.02), zero biases, LayerNorm gain 1 and bias 0); ``n_sequences``
sequences of ``seq_len`` tokens drawn uniformly from E (the all-zero padding row excluded); a common bias
b = N * b_u / ||b_u|| with b_u ~ N(0, I_d); the block is applied to x_i + b for a grid of bias norms N.

Variants of T, sharing E, the tokens and b for a seed:
- ``post_ln``: ``BertLayer`` (the paper's block; LayerNorm after each residual sum, so the output norm is pinned);
- ``pre_ln``: ``RobertaPreLayerNormLayer`` with the *same* weight matrices as ``post_ln``: only the LayerNorm
  placement differs (LayerNorm before each sublayer, none on the residual stream);
- ``gpt2``: ``GPT2Block`` with GPT-2's own initialiser (pre-LN, causal attention, output projections scaled by
  1/sqrt(2)).

Queries, keys and attention probabilities come from ``anisotropy.measure.attention`` hooks on these library modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from anisotropy.progress import Every
from anisotropy.data import prose
from anisotropy.measure import attention, statistics, taps
from anisotropy.models.session import session

VARIANTS = ("post_ln", "pre_ln", "gpt2")
VARIANT_LABELS = {
    "post_ln": "post-LN (BertLayer)",
    "pre_ln": "pre-LN (same weights)",
    "gpt2": "GPT-2 block (pre-LN, causal)",
}


@dataclass
class Block:
    """One untrained block and its embedding table E (vocab, d)."""

    variant: str
    layer: nn.Module
    embeddings: torch.Tensor
    hidden_size: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x, output_attentions=True)[0]

    def final_layer_norm(self) -> nn.LayerNorm | None:
        """The LayerNorm that produces the block's output (post-LN only)."""
        return self.layer.output.LayerNorm if self.variant == "post_ln" else None


def bert_config(**overrides):
    """BERT-base hyper-parameters (``BertConfig`` defaults), eager attention, one layer; ``overrides`` shrink it."""
    from transformers import BertConfig

    return BertConfig(num_hidden_layers=1, attn_implementation="eager", **overrides)


def build(seed: int = 0, variants=VARIANTS, **config_overrides) -> dict[str, Block]:
    """The blocks of ``variants`` for one seed, sharing the embedding table (and, for post/pre-LN, the weights).

    Weights come from the library's initialisers (``BertModel`` / ``GPT2Model`` ``post_init``) under
    ``torch.manual_seed(seed)``; the global RNG state is restored afterwards.
    """
    from transformers import BertModel, GPT2Config, GPT2Model, RobertaPreLayerNormConfig
    from transformers.models.roberta_prelayernorm.modeling_roberta_prelayernorm import RobertaPreLayerNormLayer

    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown block variants {sorted(unknown)}; choose from {VARIANTS}")
    config = bert_config(**config_overrides)
    blocks = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bert = BertModel(config, add_pooling_layer=False).eval()
        table = bert.embeddings.word_embeddings.weight.detach()
        post = bert.encoder.layer[0]
        if "post_ln" in variants:
            blocks["post_ln"] = Block("post_ln", post, table, config.hidden_size)
        if "pre_ln" in variants:
            pre_config = RobertaPreLayerNormConfig(**{k: v for k, v in config.to_dict().items()
                                                      if k not in ("model_type", "architectures")})
            pre_config._attn_implementation = "eager"
            pre = RobertaPreLayerNormLayer(pre_config).eval()
            shared = {k: v for k, v in post.state_dict().items() if "LayerNorm" not in k}
            missing, unexpected = pre.load_state_dict(shared, strict=False)
            assert not unexpected and all("LayerNorm" in k for k in missing), (missing, unexpected)
            blocks["pre_ln"] = Block("pre_ln", pre, table, config.hidden_size)
        if "gpt2" in variants:
            gpt_config = GPT2Config(
                n_embd=config.hidden_size, n_head=config.num_attention_heads, n_layer=1,
                n_inner=config.intermediate_size, n_positions=max(1024, config.max_position_embeddings),
                initializer_range=config.initializer_range, attn_implementation="eager",
            )
            blocks["gpt2"] = Block("gpt2", GPT2Model(gpt_config).h[0].eval(), table, config.hidden_size)
    return blocks


def draw_ids(vocab: int, d: int, n_sequences: int, seq_len: int, seed: int,
             padding_idx: int | None = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids drawn uniformly from a vocabulary of ``vocab`` (``padding_idx`` excluded), shape (n_sequences,
    seq_len), and the unit bias direction b_u / ||b_u|| with b_u ~ N(0, I_d)."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    ids = torch.randint(0, vocab - (padding_idx is not None), (n_sequences, seq_len), generator=gen)
    if padding_idx is not None:
        ids = ids + (ids >= padding_idx).long()
    direction = torch.randn(d, generator=gen)
    return ids, direction / direction.norm()


def draw_inputs(embeddings: torch.Tensor, n_sequences: int, seq_len: int, seed: int,
                padding_idx: int | None = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token vectors x_i drawn uniformly from the rows of E (``padding_idx`` excluded), shape (n_sequences, seq_len,
    d), and the unit bias direction b_u / ||b_u|| with b_u ~ N(0, I_d)."""
    ids, direction = draw_ids(*embeddings.shape, n_sequences, seq_len, seed, padding_idx)
    return embeddings[ids], direction


def analytic_output_norm(layer_norm: nn.LayerNorm) -> float:
    """sqrt(||gamma||^2 + ||beta||^2): the norm of every LayerNorm output row when gamma is constant and beta = 0
    (exact up to the eps term; sqrt(d) at initialisation). With trained gains it is only the value for a normalised
    vector that spreads its energy evenly over the dimensions."""
    gamma, beta = layer_norm.weight.detach(), layer_norm.bias.detach()
    return float(torch.sqrt((gamma**2).sum() + (beta**2).sum()))


def predicted_fixed_point(output_norm: float, token_sq_norm: float) -> float:
    """Bias norm N at which the mean input norm sqrt(||x||^2 + N^2) (the cross term x.b averages out) reaches the
    pinned output norm: N* = sqrt(output_norm^2 - mean ||x_i||^2)."""
    return math.sqrt(max(output_norm**2 - token_sq_norm, 0.0))


def _row_positions(seq_len: int, n_rows: int | None) -> torch.Tensor:
    """Query positions used for the per-row statistics: evenly spaced, all of them when ``n_rows`` is None."""
    if n_rows is None or n_rows >= seq_len:
        return torch.arange(seq_len)
    return torch.linspace(0, seq_len - 1, n_rows).round().long()


def _median(x: torch.Tensor) -> torch.Tensor:
    """Median over the last axis, the mean of the two middle values for an even count (as numpy's; torch.median
    returns the lower one)."""
    n = x.shape[-1]
    upper = x.kthvalue(n // 2 + 1, dim=-1).values
    return upper if n % 2 else 0.5 * (upper + x.kthvalue(n // 2, dim=-1).values)


def _spread(values: torch.Tensor, prefix: str) -> dict:
    v = values.flatten().double()
    return {prefix: float(v.mean()), f"{prefix}_q10": float(torch.quantile(v, 0.1)),
            f"{prefix}_q90": float(torch.quantile(v, 0.9))}


def attention_statistics(cap: attention.AttentionCapture, n_rows: int | None = 64) -> dict:
    """Summary of one captured attention map (probabilities (B, H, S, S), queries and keys (B, H, S, d_k)).

    - ``query_cosine`` / ``key_cosine``, ``query_norm`` / ``key_norm``: mean pairwise cosine and mean norm of the
      query and key vectors (all heads concatenated: the outputs of the query and key maps) over all tokens, the
      cosines from float64 unit vectors;
    - on ``n_rows`` evenly spaced query positions (every row statistic is an average over rows, so a subset of
      positions estimates it; all positions when None):
      ``score_*``: pre-softmax scores scale * q.k (mean, std, and ``score_row_std``, the spread within a row, which
      is all the softmax sees); ``softmax_max`` / ``_median`` / ``_min``: per row statistic over the keys, averaged
      over the batch, then mean and 10/90 % quantiles over heads and positions (Paper 1, Figure 9);
      ``entropy``: mean row entropy in nats, ``entropy_ratio``: divided by the uniform row's log(#keys);
    - ``seq_max`` / ``seq_min``: extremes over whole sequences (all rows and keys), averaged over the batch, then
      mean and range over heads (Figure 10).
    Causal maps use only the keys a row may see.
    """
    q, k, p = cap.queries, cap.keys, cap.probs
    batch, heads, seq, d_k = q.shape
    out = {}
    for name, vectors in (("query", q), ("key", k)):
        flat = vectors.transpose(1, 2).reshape(-1, heads * d_k)
        out[f"{name}_cosine"] = statistics.mean_cosine(flat.double())  # float64: see block_statistics
        out[f"{name}_norm"] = statistics.mean_norm(flat)

    device = p.device
    rows = _row_positions(seq, n_rows).to(device)
    scores = cap.scores(rows)  # (B, H, R, S)
    pr = p[:, :, rows]  # (B, H, R, S)
    if cap.causal:
        visible = torch.arange(seq, device=device)[None, :] <= rows[:, None]  # (R, S)
        valid = scores[..., visible]  # (B, H, #visible)
        parts = [(pr[..., r, : i + 1].amax(-1), _median(pr[..., r, : i + 1]), pr[..., r, : i + 1].amin(-1))
                 for r, i in enumerate(rows.tolist())]
        row_max, row_median, row_min = (torch.stack(s, dim=-1) for s in zip(*parts))
        spread = [scores[..., r, : i + 1].std(dim=-1) for r, i in enumerate(rows.tolist()) if i > 0]
        row_std = torch.stack(spread, dim=-1)
        n_keys = (rows + 1).float()
    else:
        valid = scores
        row_std = scores.std(dim=-1)
        row_max, row_median, row_min = pr.amax(-1), _median(pr), pr.amin(-1)
        n_keys = torch.full((len(rows),), float(seq), device=device)
    out.update(score_mean=float(valid.mean()), score_std=float(valid.std()), score_row_std=float(row_std.mean()))
    for name, stat in (("softmax_max", row_max), ("softmax_median", row_median), ("softmax_min", row_min)):
        out.update(_spread(stat.mean(dim=0), name))  # batch average first, then spread over (head, position)

    entropy = -torch.special.xlogy(pr, pr).sum(dim=-1)  # (B, H, R), nats
    usable = n_keys > 1
    out["entropy"] = float(entropy[..., usable].mean())
    out["entropy_ratio"] = float((entropy[..., usable] / n_keys[usable].log()).mean())

    if cap.causal:
        seq_min = p.masked_fill(~torch.ones(seq, seq, dtype=torch.bool, device=device).tril(), 1.0).amin(dim=(-1, -2))
    else:
        seq_min = p.amin(dim=(-1, -2))
    seq_max = p.amax(dim=(-1, -2))
    for name, stat in (("seq_max", seq_max), ("seq_min", seq_min)):
        per_head = stat.mean(dim=0)
        out.update({name: float(per_head.mean()), f"{name}_lo": float(per_head.min()),
                    f"{name}_hi": float(per_head.max())})
    return {key: float(value) for key, value in out.items()}


def block_statistics(block: Block, x: torch.Tensor, n_rows: int | None = 64) -> dict:
    """Input/output statistics of one forward of ``block`` on ``x`` (B, S, d), plus its attention statistics
    (mean cosines computed from float64 unit vectors)."""
    with torch.no_grad(), attention.hooks(block.layer, layers=0) as caps:
        y = block(x)
    d = x.shape[-1]
    flat_in, flat_out = x.reshape(-1, d), y.reshape(-1, d)
    # Cosines from float64 unit vectors: in float32 a mean cosine is resolved to about 1e-7 only, while at large N
    # input and output are within 1e-7 of 1 and differ by less (1 - cos ~ ||x||^2 / N^2), so float32 rounding
    # decided which one was higher.
    row = {
        "input_cosine": statistics.mean_cosine(flat_in.double()), "output_cosine": statistics.mean_cosine(flat_out.double()),
        "input_norm": statistics.mean_norm(flat_in), "output_norm": statistics.mean_norm(flat_out),
        "input_drift_norm": statistics.drift_norm(flat_in), "output_drift_norm": statistics.drift_norm(flat_out),
    }
    row.update(attention_statistics(caps[0], n_rows=n_rows))
    return {k: float(v) for k, v in row.items()}


#: The two inputs of ``inputs_at_zero``: the sweep's (rows of E alone) and BERT's whole embedding layer.
WORD_ONLY, FULL_EMBEDDINGS = "word embeddings (this page's setup)", "BERT's embedding layer"


def inputs_at_zero(seeds=(0,), n_sequences: int = 16, seq_len: int = 512, n_rows: int | None = 64,
                   **config_overrides) -> pd.DataFrame:
    """Section 4.3's N = 0 two ways, for each seed, through the same untrained post-LN block (``build``'s): fed the
    rows of E alone (the sweep's inputs at N = 0), and fed the same tokens through BERT's whole embedding layer
    (word + position + token-type embeddings, then its LayerNorm: ``BertEmbeddings``, in eval mode), whose
    token-type vector is one and the same for every token. One row per (seed, inputs): ``block_statistics`` (the
    inputs' and the queries' and keys' mean cosine and norm)."""
    from transformers import BertModel

    config = bert_config(**config_overrides)
    rows = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            bert = BertModel(config, add_pooling_layer=False).eval()
        table = bert.embeddings.word_embeddings.weight.detach()
        ids, _ = draw_ids(*table.shape, n_sequences, seq_len, seed)
        layer = Block("post_ln", bert.encoder.layer[0], table, config.hidden_size)
        with torch.no_grad():
            full = bert.embeddings(input_ids=ids)
        for name, x in ((WORD_ONLY, table[ids]), (FULL_EMBEDDINGS, full)):
            rows.append({"seed": seed, "inputs": name, **block_statistics(layer, x, n_rows=n_rows)})
    return pd.DataFrame(rows)


def sweep(bias_norms, seeds=(0,), variants=("post_ln", "pre_ln"), n_sequences: int = 16, seq_len: int = 512,
          n_rows: int | None = 64, device="cpu", progress: bool = False, **config_overrides) -> pd.DataFrame:
    """The drift experiment: one row per (variant, seed, bias_norm) with ``block_statistics`` columns, plus
    ``predicted_n_star`` (post-LN: the fixed point implied by the pinned output norm; NaN for pre-LN variants).

    ``config_overrides`` shrink the BERT-base config (tests only); the defaults are the paper's setup.
    """
    bias_norms = [float(n) for n in bias_norms]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(bias_norms) * len(seeds) * len(variants), desc="block sweep")
    rows = []
    beat = Every(30.0)
    total = len(bias_norms) * len(seeds) * len(variants)
    try:
        for seed in seeds:
            blocks = build(seed, variants=variants, **config_overrides)
            table = next(iter(blocks.values())).embeddings
            tokens, direction = draw_inputs(table, n_sequences, seq_len, seed)
            token_sq_norm = float((tokens**2).sum(-1).mean())
            tokens, direction = tokens.to(device), direction.to(device)
            for variant, block in blocks.items():
                block.layer.to(device)
                ln = block.final_layer_norm()
                predicted = predicted_fixed_point(analytic_output_norm(ln), token_sq_norm) if ln else float("nan")
                for n in bias_norms:
                    stats = block_statistics(block, tokens + n * direction, n_rows=n_rows)
                    rows.append({"variant": variant, "seed": seed, "bias_norm": n, **stats,
                                 "predicted_n_star": predicted, "seq_len": seq_len, "n_sequences": n_sequences})
                    if bar is not None:
                        bar.update()
                    beat.say(lambda: f"block sweep: {len(rows)} of {total} (seed {seed}, {variant}, N = {n:g})")
    finally:
        if bar is not None:
            bar.close()
    return pd.DataFrame(rows)


def score_samples(bias_norms, seed: int = 0, variants=("post_ln",), n_sequences: int = 16, seq_len: int = 512,
                  n_samples: int = 5_000, device="cpu", **config_overrides) -> pd.DataFrame:
    """Pre-softmax scores scale * q.k (entries a causal query may see only), ``n_samples`` per head and bias norm
    drawn uniformly over (sequence, query, key), in long form: variant, seed, bias_norm, head, score (Paper 1,
    Figure 7)."""
    blocks = build(seed, variants=variants, **config_overrides)
    table = next(iter(blocks.values())).embeddings
    tokens, direction = draw_inputs(table, n_sequences, seq_len, seed)
    gen = torch.Generator().manual_seed(20_000 + seed)
    tokens, direction = tokens.to(device), direction.to(device)
    parts = []
    with torch.no_grad():
        for variant, block in blocks.items():
            block.layer.to(device)
            for n in bias_norms:
                with attention.hooks(block.layer, layers=0, keep_probs=False) as caps:
                    block.layer(tokens + float(n) * direction, output_attentions=True)
                cap = caps[0]
                b, h, s, _ = cap.queries.shape
                pick = lambda hi: torch.randint(0, hi, (h, n_samples), generator=gen).to(device)  # noqa: E731
                bi, qi, ki = pick(b), pick(s), pick(s)
                hi = torch.arange(h, device=device)[:, None].expand(h, n_samples)
                if cap.causal:  # keep only keys the query may see
                    qi, ki = torch.maximum(qi, ki), torch.minimum(qi, ki)
                values = (cap.queries[bi, hi, qi] * cap.keys[bi, hi, ki]).sum(-1) * cap.scale
                parts.append(pd.DataFrame({"variant": variant, "seed": seed, "bias_norm": float(n),
                                           "head": hi.reshape(-1).cpu().numpy().astype(np.int16),
                                           "score": values.reshape(-1).cpu().numpy()}))
    return pd.concat(parts, ignore_index=True)


def fixed_points(frame: pd.DataFrame, on: str = "mean") -> pd.DataFrame:
    """N* per (variant, seed): the first bias norm where the output's norm falls from above to below the input's,
    by linear interpolation between grid points; NaN where the curves do not cross on the grid. ``on="mean"``: the
    mean norm of the rows (``output_norm``, ``input_norm``); ``on="average"``: the norm of the average row
    (``output_drift_norm``, ``input_drift_norm``, the quantity the paper's text follows; the input's is about N)."""
    out_col, in_col = {"mean": ("output_norm", "input_norm"),
                       "average": ("output_drift_norm", "input_drift_norm")}[on]
    rows = []
    for (variant, seed), group in frame.groupby(["variant", "seed"], sort=True):
        g = group.sort_values("bias_norm")
        n = g["bias_norm"].to_numpy()
        gap = (g[out_col] - g[in_col]).to_numpy()
        n_star = float("nan")
        for i in range(len(n) - 1):
            if gap[i] > 0 >= gap[i + 1]:
                n_star = float(n[i] + gap[i] * (n[i + 1] - n[i]) / (gap[i] - gap[i + 1]))
                break
        predicted = g["predicted_n_star"].iloc[0] if "predicted_n_star" in g else float("nan")
        rows.append({"variant": variant, "seed": seed, "n_star": n_star, "predicted_n_star": float(predicted)})
    return pd.DataFrame(rows)


def threshold_norm(frame: pd.DataFrame, column: str, level: float) -> pd.DataFrame:
    """Per (variant, seed): the first bias norm where ``column`` falls below ``level`` (linear interpolation between
    grid points; NaN if it never does on the grid)."""
    rows = []
    for (variant, seed), g in frame.groupby(["variant", "seed"], sort=True):
        g = g.sort_values("bias_norm")
        n, v = g["bias_norm"].to_numpy(), g[column].to_numpy() - level
        found = float("nan")
        for i in range(len(n) - 1):
            if v[i] >= 0 > v[i + 1]:
                found = float(n[i] + v[i] * (n[i + 1] - n[i]) / (v[i] - v[i + 1]))
                break
        rows.append({"variant": variant, "seed": seed, "bias_norm": found})
    return pd.DataFrame(rows)


def interpolate(frame: pd.DataFrame, column: str, bias_norm: float) -> pd.DataFrame:
    """``column`` linearly interpolated at ``bias_norm``, per (variant, seed)."""
    rows = []
    for (variant, seed), g in frame.groupby(["variant", "seed"], sort=True):
        g = g.sort_values("bias_norm")
        value = float(np.interp(bias_norm, g["bias_norm"], g[column])) if np.isfinite(bias_norm) else float("nan")
        rows.append({"variant": variant, "seed": seed, column: value})
    return pd.DataFrame(rows)


def _output_layer_norms(model: nn.Module) -> list[nn.LayerNorm] | None:
    """The LayerNorms that produce a post-LN BERT-family model's hidden states: embeddings, then each layer's output;
    None for other architectures."""
    embeddings, encoder = getattr(model, "embeddings", None), getattr(model, "encoder", None)
    layers = getattr(encoder, "layer", None)
    if embeddings is None or layers is None or not hasattr(embeddings, "LayerNorm"):
        return None
    found = [embeddings.LayerNorm] + [getattr(getattr(layer, "output", None), "LayerNorm", None) for layer in layers]
    return found if all(isinstance(ln, nn.LayerNorm) for ln in found) else None


def reference_norms(models, n_texts: int = 256, max_length: int = 128, seed: int = 0, variant: str = "pretrained",
                    batch_size: int = 16, device="cpu") -> pd.DataFrame:
    """Hidden states of trained models, per layer (layer 0 = embeddings), on the offline prose, each model loaded on
    ``device`` (its statistics measured there too: ``measure.rows``' device path): ``mean_norm``,
    ``drift_norm`` (||mean||, the trained analogue of the bias norm N), ``mean_cosine``, ``hidden_size`` and, for
    post-LN BERT-family models, ``layer_norm_norm`` = ``analytic_output_norm`` of the LayerNorm that outputs the
    layer."""
    texts = prose.text_samples(n_texts, seed=seed)
    frames = []
    for name in models:
        with session(name, batch_size=batch_size, variant=variant, device=device) as loaded:
            stats = taps.extract(loaded, texts, batch_size=batch_size, max_length=max_length, seed=seed)
            norms = _output_layer_norms(loaded.model)
            if norms is not None and len(norms) != len(stats):
                norms = None
            frames.append(pd.DataFrame([
                {"model": name, "label": loaded.label, "layer": layer,
                 "hidden_size": int(loaded.model.config.hidden_size), "mean_norm": s.mean_norm,
                 "drift_norm": s.drift_norm, "mean_cosine": s.mean_cosine,
                 "layer_norm_norm": analytic_output_norm(norms[layer]) if norms is not None else float("nan")}
                for layer, s in sorted(stats.items())]))
            del norms  # the model's own LayerNorm modules: they must not outlive the session
    return pd.concat(frames, ignore_index=True)
