"""What a training run optimises, update by update: the batch of update ``k`` (packed token windows, BERT-style
masks, or fresh synthetic images), drawn from ``SeedSequence([seed, k])``; the loss, with the language models' output
layer fused into the cross-entropy (``linear_cross_entropy``, under autocast too); and the validation loss and
baselines of a run. The token streams are ``training.tokens`` arrays on disk, prepared once per corpus, split and
tokenizer (``prepare``), and read a window at a time.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from anisotropy import fingerprint
from anisotropy.data import images
from anisotropy.training import tokens
from anisotropy.training.recipes import (TEXT_KINDS, Recipe, data_fingerprint, image_processor, paragraph_batches,
                                         pixel_values, tokenizer)

_VALIDATION_TAG = 2**31 - 1  # seeds the validation masks and images, the same for every training seed


class _LinearCrossEntropy(torch.autograd.Function):
    """mean_i [logsumexp_v z_iv - z_i,y_i] with z = h W^T + b, computed ``chunk`` rows at a time and recomputed in
    the backward pass (dz = softmax(z) - onehot(y)), so the (rows x vocabulary) logits never exist whole. The products
    run in ``dtype`` (autocast's, under autocast), the log-sum-exp, softmax and weight gradient sums in float32 (or
    the inputs' wider dtype)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk, dtype):
        n = hidden.shape[0]
        w, b, wide = _cast(weight, dtype), _cast(bias, dtype), _wide(dtype)
        lse, picked = hidden.new_empty(n, dtype=wide), hidden.new_empty(n, dtype=wide)
        with torch.autocast(hidden.device.type, enabled=False):  # the dtypes are set here, not by autocast
            for i in range(0, n, chunk):
                z = _cast(_logits(_cast(hidden[i:i + chunk], dtype), w, b), wide)
                lse[i:i + chunk] = torch.logsumexp(z, dim=-1)
                picked[i:i + chunk] = z.gather(1, targets[i:i + chunk, None]).squeeze(1)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk, ctx.dtype = chunk, dtype
        return (lse - picked).mean()

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        n, chunk, dtype = hidden.shape[0], ctx.chunk, ctx.dtype
        w, b, wide = _cast(weight, dtype), _cast(bias, dtype), _wide(dtype)
        d_hidden, d_weight = torch.empty_like(hidden), torch.zeros_like(weight)
        d_bias = torch.zeros_like(bias) if bias is not None else None
        with torch.autocast(hidden.device.type, enabled=False):
            for i in range(0, n, chunk):
                h = _cast(hidden[i:i + chunk], dtype)
                p = _cast(_logits(h, w, b), wide).sub_(lse[i:i + chunk, None]).exp_()
                p[torch.arange(len(p)), targets[i:i + chunk]] -= 1.0
                p.mul_(grad / n)
                low = _cast(p, dtype)
                d_hidden[i:i + chunk] = low @ w
                if low.dtype == d_weight.dtype:
                    d_weight.addmm_(low.T, h)
                else:  # a low-precision product per chunk, summed over the chunks in float32
                    d_weight += low.T @ h
                if d_bias is not None:
                    d_bias += p.sum(0)
        return d_hidden, d_weight, d_bias, None, None, None


def _cast(tensor, dtype):
    return tensor if tensor is None or tensor.dtype == dtype else tensor.to(dtype)


def _wide(dtype):
    return torch.promote_types(dtype, torch.float32)


def _logits(hidden, weight, bias):
    return hidden @ weight.T if bias is None else torch.addmm(bias, hidden, weight.T)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         targets: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T + bias, targets)`` (mean over rows, natural log), with its gradients, in
    blocks of ``chunk`` rows; under autocast the products run in its dtype and the loss is float32. Measured on a
    2-core EPYC whose fresh memory pages cost ~10 us each: the GPT-2 recipe's output layer and loss (2,048 rows x
    4,096 tokens) took 0.30 s a step whole and 0.23 s in blocks, since the 32 MiB logits and their gradient never need
    new pages."""
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, chunk, dtype)


def _step_rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, step]))


class _TextTask:
    """Packed windows of the training token stream (paragraphs joined by [SEP] / <|endoftext|>); for the masked
    kinds each window is framed by [CLS] ... [SEP] and 15% of its tokens are corrupted BERT-style (80% [MASK],
    10% random token, 10% unchanged), predicted at those positions only."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.preprocessor = tokenizer(recipe)
        tok = self.preprocessor
        self.masked = recipe.kind != "clm"
        self.vocab_size = len(tok)
        self.special_ids = np.array(sorted(tok.all_special_ids))
        joiner = _joiner(recipe, tok)
        self.window = recipe.seq_len - 2 if self.masked else recipe.seq_len
        train, held = (self._tokens(split, joiner) for split in ("train", "validation"))
        self.stream, self.counts = train.ids, train.counts  # the stream: a read-only memmap
        held_stream = held.ids
        n = min(recipe.eval_size, len(held_stream) // self.window)
        if n < 1 or len(self.stream) <= self.window:
            raise ValueError(f"seq_len {recipe.seq_len} is too long for the {recipe.corpus} corpus")
        windows = np.asarray(held_stream[: n * self.window], dtype=np.int64).reshape(n, self.window)
        if self.masked:  # a small held-out text is masked several times over, up to eval_size sequences
            windows = np.tile(windows, (max(1, recipe.eval_size // n), 1))
        rng = np.random.default_rng(np.random.SeedSequence([_VALIDATION_TAG]))
        self.validation = self._assemble(windows, rng)
        self.baselines = {"unigram": self._unigram_baseline(), "chance": math.log(self.vocab_size)}
        self.sizes = {"train_tokens": int(len(self.stream)), "validation_tokens": int(len(held_stream)),
                      "validation_windows": int(n), "validation_sequences": int(len(windows))}

    def _tokens(self, split: str, joiner: int) -> tokens.TokenArray:
        """The ``split``'s paragraphs as one token stream, each followed by ``joiner`` (``prepare``)."""
        return corpus_tokens(self.recipe.corpus, split, self.preprocessor, joiner)

    def _assemble(self, windows: np.ndarray, rng: np.random.Generator) -> dict:
        if not self.masked:
            ids = torch.from_numpy(windows)
            return {"input_ids": ids, "labels": ids.clone()}
        tok = self.preprocessor
        n = len(windows)
        ids = np.concatenate([np.full((n, 1), tok.cls_token_id), windows, np.full((n, 1), tok.sep_token_id)], axis=1)
        chosen = (rng.random(ids.shape) < self.recipe.mask_prob) & ~np.isin(ids, self.special_ids)
        how = rng.random(ids.shape)
        random_ids = rng.integers(len(self.special_ids), self.vocab_size, size=ids.shape)
        labels = np.where(chosen, ids, -100)
        corrupted = np.where(chosen & (how < 0.8), tok.mask_token_id, ids)
        corrupted = np.where(chosen & (how >= 0.8) & (how < 0.9), random_ids, corrupted)
        return {"input_ids": torch.from_numpy(corrupted), "labels": torch.from_numpy(labels)}

    def batch(self, step: int) -> dict:
        rng = _step_rng(self.recipe.seed, step)
        starts = rng.integers(0, len(self.stream) - self.window + 1, size=self.recipe.batch_size)
        return self._assemble(self.stream[starts[:, None] + np.arange(self.window)].astype(np.int64), rng)

    def _unigram_baseline(self) -> float:
        """Cross-entropy (nats) on the validation targets of the unigram distribution of the training stream
        (add-1/2 smoothed): what a model that ignores context can reach."""
        counts = self.counts.astype(float) + 0.5  # np.bincount of the stream, counted as it was written
        if self.masked:
            counts[self.special_ids] = 0.0  # masked targets are never special tokens
        with np.errstate(divide="ignore"):
            log_p = np.log(counts / counts.sum())
        labels = self.validation["labels"].numpy()
        targets = labels[labels != -100] if self.masked else labels[:, 1:].ravel()
        return float(-log_p[targets].mean())

    def loss(self, model, batch: dict) -> torch.Tensor:
        return text_loss(model, batch, self.masked)

    def evaluate(self, model, device) -> dict:
        total, count = 0.0, 0
        val = self.validation
        for i in range(0, len(val["input_ids"]), 2 * self.recipe.batch_size):
            part = {k: v[i: i + 2 * self.recipe.batch_size].to(device) for k, v in val.items()}
            n = int((part["labels"] != -100).sum()) if self.masked else part["labels"][:, 1:].numel()
            total += float(self.loss(model, part)) * n
            count += n
        return {"loss": total / count}


def text_loss(model, batch: dict, masked: bool) -> torch.Tensor:
    """The loss of GPT2LMHeadModel (next token) or BertForMaskedLM (the positions whose label is not -100), with the
    output layer fused into the cross-entropy (``linear_cross_entropy``); the MLM head runs on the masked positions
    only (~7x fewer logits)."""
    if not masked:
        hidden = model.transformer(input_ids=batch["input_ids"]).last_hidden_state[:, :-1]
        return linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), model.lm_head.weight, None,
                                    batch["labels"][:, 1:].reshape(-1))
    hidden = model.bert(input_ids=batch["input_ids"]).last_hidden_state
    chosen = batch["labels"] != -100
    head = model.cls.predictions
    return linear_cross_entropy(head.transform(hidden[chosen]), head.decoder.weight, head.decoder.bias,
                                batch["labels"][chosen])


class _ImageTask:
    """Fresh ``synthetic_shapes`` images every update (no image is seen twice), classified into 6 shapes; the
    validation set is a fixed draw shared by every seed."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.preprocessor = image_processor(recipe)
        pixels, labels = images.synthetic_shapes(recipe.eval_size, recipe.image_size, seed=_VALIDATION_TAG)
        self.validation = self._assemble(pixels, labels)
        self.baselines = {"chance": math.log(len(images.SHAPES))}
        self.sizes = {"validation_images": int(recipe.eval_size)}

    def _assemble(self, pixels: np.ndarray, labels: np.ndarray) -> dict:
        return {"pixel_values": pixel_values(pixels, self.preprocessor),
                "labels": torch.as_tensor(labels, dtype=torch.long)}

    def batch(self, step: int) -> dict:
        seed = int(_step_rng(self.recipe.seed, step).integers(2**31 - 1))
        return self._assemble(*images.synthetic_shapes(self.recipe.batch_size, self.recipe.image_size, seed=seed))

    def loss(self, model, batch: dict) -> torch.Tensor:
        return model(pixel_values=batch["pixel_values"], labels=batch["labels"]).loss

    def evaluate(self, model, device) -> dict:
        total, correct, n = 0.0, 0, len(self.validation["labels"])
        for i in range(0, n, 2 * self.recipe.batch_size):
            part = {k: v[i: i + 2 * self.recipe.batch_size].to(device) for k, v in self.validation.items()}
            out = model(**part)
            total += float(out.loss) * len(part["labels"])
            correct += int((out.logits.argmax(-1) == part["labels"]).sum())
        return {"loss": total / n, "accuracy": correct / n}


def task_for(recipe: Recipe):
    """The recipe's training task (text windows or images): its preprocessor, batches, loss and validation."""
    return _TextTask(recipe) if recipe.kind in TEXT_KINDS else _ImageTask(recipe)


def corpus_tokens(corpus: str, split: str, preprocessor, joiner: int) -> tokens.TokenArray:
    """One split of a text corpus tokenized by ``preprocessor`` (a ``PreTrainedTokenizerFast``), each paragraph
    followed by ``joiner``: a ``tokens`` array named by the corpus, its content, the tokenizer's own hash, the joiner
    and the trainer's fingerprint (``checkpoints.stale_runs`` finds those of another trainer)."""
    backend = preprocessor.backend_tokenizer
    name = (f"{corpus}-{split}-{data_fingerprint('mlm', 0, corpus)}-k{tokens.tokenizer_fingerprint(backend)}"
            f"-j{joiner}-t{fingerprint.trainer()}")
    return tokens.token_array(name, lambda: paragraph_batches(corpus, split), backend, len(preprocessor), joiner)


def prepare(recipe: Recipe) -> None:
    """What a text recipe's runs share, made once before they start: its tokenizer and token arrays."""
    if recipe.kind in TEXT_KINDS:
        tok = tokenizer(recipe)
        for split in ("train", "validation"):
            corpus_tokens(recipe.corpus, split, tok, _joiner(recipe, tok))


def _joiner(recipe: Recipe, tok) -> int:
    """The token between two paragraphs of the stream: [SEP] for the masked kinds, <|endoftext|> for ``clm``."""
    return tok.eos_token_id if recipe.kind == "clm" else tok.sep_token_id
