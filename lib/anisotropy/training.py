"""The small-model trainer and the self-trained checkpoint suites (MultiBERTs and Pythia in miniature).

A ``Recipe`` fixes everything that determines the weights (kind, sizes, optimiser, steps, seed, attention variant).
``train(recipe)`` pretrains from scratch and saves checkpoints at log-spaced steps, step 0 (the initialisation)
included, under ``paths.cache_dir()/checkpoints/<suite>/<recipe-hash>/seed-<k>/step-<n>``. Each checkpoint is a
standard ``save_pretrained`` folder of a standard ``transformers`` class with its tokenizer or image processor, so
``registry.load(path)`` reads it like a MultiBERTs or Pythia revision, plus ``training_state.json`` (step, recipe,
loss curves so far, baselines). The newest checkpoint also holds ``optimizer.pt`` for resuming.

Determinism: the batch, the masking and the dropout of update ``k`` are drawn from ``SeedSequence([seed, k])``, so a
run has no random state to carry across an interruption: weights + optimiser state at step ``k`` determine the rest,
and a resumed run ends bit-identical to an uninterrupted one (on CPU, same thread count and library versions).

Kinds: ``mlm`` (BertForMaskedLM, WordPiece), ``clm`` (GPT2LMHeadModel, byte-level BPE), ``char-mlm`` (BertForMaskedLM
over bytes), ``vit`` (ViTForImageClassification on ``data_images.synthetic_shapes``), ``cnn`` (ResNetForImageClassification).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from . import data, data_docstrings, data_images, data_prose, data_wikipedia, executor, fingerprint, paths

KINDS = ("mlm", "clm", "char-mlm", "vit", "cnn")
TEXT_KINDS = ("mlm", "clm", "char-mlm")
BERT_KINDS = ("mlm", "char-mlm")  # BertForMaskedLM: the kinds with attention variants and relative positions
# The attention block of the transformer kinds. Each variant names the `transformers` attention implementation the
# model runs with; the ablation chapter's variants (issue 11, ``attention_variants``) change how queries and keys
# enter the scores, run eager attention, and are installed by ``attention_variants.apply_attention_variant``.
ATTENTION_VARIANTS = {"standard": "sdpa", "qk_norm": "eager", "centred": "eager", "temperature": "eager"}
# Position information of the BERT kinds: learnt absolute embeddings (BERT's own), or learnt embeddings of the
# distance between query and key, met by the query (Shaw et al. 2018; `transformers`' "relative_key") or by the
# query and the key ("relative_key_query", Huang et al. 2020).
# Measured (issue 17, benchmarks/results/recipes.jsonl): with absolute positions the best subword encoder of the sweep
# ended 0.64 nats below the unigram baseline after 2,400 updates; with relative ones, 1.3-1.7 nats below after 800.
POSITIONS = ("absolute", "relative_key", "relative_key_query")
VALIDATION_EVERY = 10  # every 10th prose paragraph is held out for the validation loss
# Text corpora: the docstring prose of the installed packages (local profile: millions of tokens, offline, keyed by
# its content hash), the Python reference's prose (50k tokens: small tests), or WikiText-103 (train / validation
# splits; paper profile, needs the Hub or its cache).
CORPORA = ("docstrings", "prose", "wikitext-103")
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
GPT_SPECIALS = ("<|endoftext|>", "<|pad|>")
_VALIDATION_TAG = 2**31 - 1  # seeds the validation masks and images, the same for every training seed


# ---- recipes ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    """Everything that determines a trained model. ``seq_len`` counts tokens (bytes for ``char-mlm``), special tokens
    included; vision kinds use ``image_size``/``patch_size`` instead. ``mask_prob``: the share of tokens the masked
    kinds corrupt and predict; ``positions``: ``POSITIONS``. ``width`` is the hidden size (the stem's channels
    for ``cnn``, doubling at each of its ``depth`` stages). Learning rate: linear warm-up over ``warmup`` updates to
    ``lr``, then cosine decay to ``min_lr_ratio * lr`` at ``steps``. Validation: every checkpoint step and every
    ``eval_every`` updates, on ``eval_size`` held-out sequences (the held-out text, masked several times over for
    the masked kinds) or images. ``threads``: torch CPU threads (0 = every core this process may use); part of the
    recipe because the thread count changes how matrix products are summed, hence the weights' last bits, and one
    thread is also the fastest choice on a loaded 2-core machine (two threads spin against each other there)."""

    suite: str
    kind: str
    width: int = 128
    depth: int = 4
    heads: int = 4
    seq_len: int = 128
    vocab_size: int = 2048
    corpus: str = "prose"
    image_size: int = 32
    patch_size: int = 4
    batch_size: int = 16
    steps: int = 600
    lr: float = 1e-3
    warmup: int = 60
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    dropout: float = 0.1
    mask_prob: float = 0.15
    positions: str = "absolute"
    n_checkpoints: int = 10
    eval_every: int = 50
    eval_size: int = 64
    seed: int = 0
    device: str = "cpu"
    threads: int = 1
    attention_variant: str = "standard"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Recipe {self.suite!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.attention_variant not in ATTENTION_VARIANTS:
            raise ValueError(f"Recipe {self.suite!r}: attention_variant must be one of {sorted(ATTENTION_VARIANTS)}, "
                             f"got {self.attention_variant!r}")
        if self.kind in TEXT_KINDS and self.corpus not in CORPORA:
            raise ValueError(f"Recipe {self.suite!r}: corpus must be one of {CORPORA}, got {self.corpus!r}")
        if self.positions not in POSITIONS or (self.positions != "absolute" and self.kind not in BERT_KINDS):
            raise ValueError(f"Recipe {self.suite!r}: positions must be one of {POSITIONS} (relative ones for the "
                             f"BERT kinds only), got {self.positions!r}")
        if self.kind not in BERT_KINDS and self.attention_variant != "standard":
            raise ValueError(f"Recipe {self.suite!r}: attention variants exist for the BERT kinds (mlm, char-mlm)")
        if not (self.warmup >= 0 and self.steps >= 1 and self.n_checkpoints >= 2):
            raise ValueError(f"Recipe {self.suite!r}: need steps >= 1, warmup >= 0, n_checkpoints >= 2")
        if self.kind in ("vit",) and self.image_size % self.patch_size:
            raise ValueError(f"Recipe {self.suite!r}: image_size must be a multiple of patch_size")
        for f in fields(self):  # YAML and papermill hand over ints for floats and vice versa
            if f.type in ("int", "float"):
                object.__setattr__(self, f.name, (int if f.type == "int" else float)(getattr(self, f.name)))

    @property
    def checkpoint_steps(self) -> tuple[int, ...]:
        """Step 0 and ``n_checkpoints - 1`` log-spaced steps from 1 to ``steps`` (fewer where rounding collides)."""
        spaced = np.round(np.geomspace(1, self.steps, self.n_checkpoints - 1)).astype(int)
        return tuple(sorted({0, *spaced.tolist(), self.steps}))

    @property
    def eval_steps(self) -> tuple[int, ...]:
        """Steps where the validation loss is measured: every checkpoint and every ``eval_every`` updates."""
        regular = range(0, self.steps + 1, self.eval_every) if self.eval_every > 0 else ()
        return tuple(sorted({*self.checkpoint_steps, *regular}))

    @property
    def hash(self) -> str:
        """12 hex digits identifying the weights-determining content (every field but ``suite`` and ``seed``), the
        trainer's code (``fingerprint.trainer()``: the trainer's modules, what they compute with, package versions)
        and the training data."""
        content = {k: v for k, v in asdict(self).items() if k not in ("suite", "seed")}
        payload = {"recipe": content, "trainer": fingerprint.trainer(),
                   "data": _data_fingerprint(self.kind, self.image_size, self.corpus)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]

    def lr_at(self, step: int) -> float:
        """Learning rate of update ``step`` (1-based): linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
        if step <= self.warmup:
            return self.lr * step / max(self.warmup, 1)
        progress = (step - self.warmup) / max(self.steps - self.warmup, 1)
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def recipes(name: str, spec: dict) -> list[Recipe]:
    """One ``Recipe`` per seed of a suite specification ``{kind: ..., seeds: [0, 1, 2], width: ..., ...}``."""
    spec = dict(spec)
    seeds = spec.pop("seeds", [spec.pop("seed", 0)])
    unknown = set(spec) - {f.name for f in fields(Recipe)}
    if unknown:
        raise ValueError(f"Suite {name!r}: unknown recipe fields {sorted(unknown)}")
    return [Recipe(suite=name, seed=int(s), **spec) for s in seeds]


def suite_specs(profile: str = "local") -> dict[str, dict]:
    """The suites of a profile: the ``suites`` parameter of its ``checkpoint_suites`` chapter."""
    from . import profiles

    block = profiles.chapter_parameters(profile, "checkpoint_suites")
    if "suites" not in block:
        raise KeyError(f"profile {profile!r} sets no suites for the checkpoint_suites chapter")
    return block["suites"]


def suite(name: str, profile: str = "local") -> list[Recipe]:
    """The recipes (one per seed) of suite ``name`` (``mlm``, ``clm``, ``char_mlm``, ``vit``, ``cnn``) in a profile."""
    specs = suite_specs(profile)
    if name not in specs:
        raise KeyError(f"No suite {name!r} in profile {profile!r}; its suites are {sorted(specs)}")
    return recipes(name, specs[name])


def suite_checkpoints(name: str, profile: str = "local", progress: bool = True) -> dict[int, list["Checkpoint"]]:
    """``{seed: [Checkpoint, ...]}`` of a profile's suite, training whatever is not in the cache yet."""
    return {r.seed: train(r, progress=progress) for r in suite(name, profile)}


# ---- checkpoints on disk ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checkpoint:
    """One saved model: ``path`` is a ``save_pretrained`` folder; ``loss`` the validation loss at ``step`` (nats)."""

    suite: str
    seed: int
    step: int
    path: Path
    loss: float


def run_dir(recipe: Recipe, out_dir: str | Path | None = None) -> Path:
    root = Path(out_dir) if out_dir is not None else paths.cache_dir() / "checkpoints"
    return root / recipe.suite / recipe.hash / f"seed-{recipe.seed}"


def stale_runs(out_dir: str | Path | None = None) -> list[Path]:
    """Trained runs and tokenizers in the cache that no recipe of the current code reaches: their trainer
    fingerprint (recorded in ``training_state.json``, or in a tokenizer folder's name) is not the current one."""
    current = fingerprint.trainer()
    root = Path(out_dir) if out_dir is not None else paths.cache_dir() / "checkpoints"
    stale = []
    for run in sorted(root.glob("*/*")):  # <suite>/<recipe hash>
        states = sorted(run.glob("seed-*/step-*/training_state.json"))
        trainer = json.loads(states[0].read_text()).get("versions", {}).get("trainer") if states else None
        if trainer != current:
            stale.append(run)
    if out_dir is None:
        stale += [t for t in sorted((paths.cache_dir() / "tokenizers").glob("*")) if not t.name.endswith(f"-t{current}")]
    return stale


def _step_of(folder: Path) -> int:
    return int(folder.name.split("-", 1)[1])


def checkpoints(recipe: Recipe, out_dir: str | Path | None = None) -> list[Checkpoint]:
    """The checkpoints of ``recipe`` already on disk, by step (empty if never trained; partial if interrupted)."""
    found = []
    for folder in run_dir(recipe, out_dir).glob("step-*"):
        state_file = folder / "training_state.json"
        if not folder.name.removeprefix("step-").isdigit() or not state_file.is_file():
            continue
        state = json.loads(state_file.read_text())
        found.append(Checkpoint(recipe.suite, recipe.seed, state["step"], folder, state["validation"][-1]["loss"]))
    return sorted(found, key=lambda c: c.step)


def is_trained(recipe: Recipe, out_dir: str | Path | None = None) -> bool:
    done = checkpoints(recipe, out_dir)
    return bool(done) and done[-1].step == recipe.steps


def training_state(checkpoint: Checkpoint | str | Path) -> dict:
    """The ``training_state.json`` of a checkpoint (step, recipe, loss curves so far, baselines, timings)."""
    folder = checkpoint.path if isinstance(checkpoint, Checkpoint) else Path(checkpoint)
    return json.loads((folder / "training_state.json").read_text())


# ---- data: tokenizers, token streams, images -------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _data_fingerprint(kind: str, image_size: int, corpus: str = "prose") -> str:
    if kind in TEXT_KINDS and corpus == "docstrings":
        blob = f"docstrings {data_docstrings.docstring_corpus().content_hash}".encode()  # its content, not the packages' names
    elif kind in TEXT_KINDS and corpus != "prose":
        blob = corpus.encode()  # a published, fixed dataset: its name identifies it
    elif kind in TEXT_KINDS:
        blob = data_prose.prose_corpus().encode()
    else:
        blob = data_images.synthetic_shapes(4, image_size, seed=0)[0].tobytes()
    return hashlib.sha256(blob).hexdigest()[:12]


@lru_cache(maxsize=2)
def split_paragraphs(corpus: str = "prose") -> tuple[list[str], list[str]]:
    """(train, validation) paragraphs. Prose: every ``VALIDATION_EVERY``-th distinct paragraph is held out.
    Docstrings: the corpus's own split by document (``data_docstrings.docstring_corpus``). WikiText-103: its train and
    validation splits (lines of >= 80 characters, headings dropped)."""
    if corpus == "wikitext-103":
        return data_wikipedia.wikitext_lines("train"), data_wikipedia.wikitext_lines("validation")
    if corpus == "docstrings":  # deduplicated and split by document when extracted
        found = data_docstrings.docstring_corpus()
        return list(found.train), list(found.validation)
    # pydoc repeats some paragraphs under several topics: deduplicate first, or the held-out text leaks into training
    paragraphs = list(dict.fromkeys(data_prose.prose_paragraphs()))
    train = [p for i, p in enumerate(paragraphs) if i % VALIDATION_EVERY != VALIDATION_EVERY - 1]
    held = [p for i, p in enumerate(paragraphs) if i % VALIDATION_EVERY == VALIDATION_EVERY - 1]
    return train, held


def _build_tokenizer(kind: str, vocab_size: int, seq_len: int, corpus: str = "prose"):
    """A ``PreTrainedTokenizerFast`` trained on the training paragraphs (``char-mlm``: the 256 bytes, no training)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    train_text, _ = split_paragraphs(corpus)
    if kind == "clm":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        # a fixed initial alphabet (all 256 bytes) makes the BPE trainer deterministic
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(GPT_SPECIALS), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(train_text, trainer)
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=GPT_SPECIALS[0], eos_token=GPT_SPECIALS[0],
                                       pad_token=GPT_SPECIALS[1], model_max_length=seq_len,
                                       # GPT-2 adds wte(token_type_ids) to its inputs: never hand it type ids
                                       model_input_names=["input_ids", "attention_mask"])
    if kind == "mlm":
        from .registry import train_wordpiece

        tok = train_wordpiece(train_text, vocab_size, BERT_SPECIALS)
    else:  # char-mlm: one token per UTF-8 byte, case and spacing kept
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        vocab = {t: i for i, t in enumerate([*BERT_SPECIALS, *alphabet])}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(BERT_SPECIALS))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=seq_len)


def tokenizer(recipe: Recipe):
    """The recipe's tokenizer, trained once and cached under ``cache_dir()/tokenizers``."""
    from transformers import PreTrainedTokenizerFast

    if recipe.kind not in TEXT_KINDS:
        raise ValueError(f"a {recipe.kind} recipe has no tokenizer")
    vocab = recipe.vocab_size if recipe.kind != "char-mlm" else 256
    folder = paths.cache_dir() / "tokenizers" / (
        f"{recipe.kind}-v{vocab}-len{recipe.seq_len}-{recipe.corpus}-{_data_fingerprint(recipe.kind, 0, recipe.corpus)}"
        f"-t{fingerprint.trainer()}")
    if not (folder / "tokenizer.json").is_file():
        paths.atomic_folder(folder, lambda tmp: _build_tokenizer(recipe.kind, vocab, recipe.seq_len, recipe.corpus)
                            .save_pretrained(tmp))
    return PreTrainedTokenizerFast.from_pretrained(folder)


def image_processor(recipe: Recipe):
    """Resize to ``image_size`` and map pixel values to [-1, 1] (per channel ``(x / 255 - 0.5) / 0.5``)."""
    from transformers import ViTImageProcessor

    return ViTImageProcessor(do_resize=True, size={"height": recipe.image_size, "width": recipe.image_size},
                             do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                             image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


def pixel_values(images: np.ndarray, processor) -> torch.Tensor:
    """What ``processor`` (``image_processor``) makes of uint8 images (n, h, w, 3) already at its size: rescaled and
    normalised per channel, channels first, float32. Computed directly: the processor's per-image loop (its resize
    is the identity here) took a tenth of each update of the local ViT recipe."""
    size = processor.size
    if images.shape[1:3] != (size["height"], size["width"]):
        return processor(images=list(images), return_tensors="pt")["pixel_values"]
    mean = np.asarray(processor.image_mean, dtype=np.float32)
    std = np.asarray(processor.image_std, dtype=np.float32)
    scaled = images.astype(np.float32) * np.float32(processor.rescale_factor)
    return torch.from_numpy(np.ascontiguousarray(((scaled - mean) / std).transpose(0, 3, 1, 2)))


class _LinearCrossEntropy(torch.autograd.Function):
    """mean_i [logsumexp_v z_iv - z_i,y_i] with z = h W^T + b, computed ``chunk`` rows at a time and recomputed in
    the backward pass (dz = softmax(z) - onehot(y)), so the (rows x vocabulary) logits never exist whole."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk):
        n = hidden.shape[0]
        lse, picked = hidden.new_empty(n), hidden.new_empty(n)
        for i in range(0, n, chunk):
            z = _logits(hidden[i:i + chunk], weight, bias)
            lse[i:i + chunk] = torch.logsumexp(z, dim=-1)
            picked[i:i + chunk] = z.gather(1, targets[i:i + chunk, None]).squeeze(1)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk = chunk
        return (lse - picked).mean()

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        n, chunk = hidden.shape[0], ctx.chunk
        d_hidden, d_weight = torch.empty_like(hidden), torch.zeros_like(weight)
        d_bias = torch.zeros_like(bias) if bias is not None else None
        for i in range(0, n, chunk):
            p = _logits(hidden[i:i + chunk], weight, bias).sub_(lse[i:i + chunk, None]).exp_()
            p[torch.arange(len(p)), targets[i:i + chunk]] -= 1.0
            p.mul_(grad / n)
            d_hidden[i:i + chunk] = p @ weight
            d_weight.addmm_(p.T, hidden[i:i + chunk])
            if d_bias is not None:
                d_bias += p.sum(0)
        return d_hidden, d_weight, d_bias, None, None


def _logits(hidden, weight, bias):
    return hidden @ weight.T if bias is None else torch.addmm(bias, hidden, weight.T)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         targets: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T + bias, targets)`` (mean over rows, natural log), with its gradients, in
    blocks of ``chunk`` rows. Measured on a 2-core EPYC whose fresh memory pages cost ~10 us each: the GPT-2 recipe's
    output layer and loss (2,048 rows x 4,096 tokens) took 0.30 s a step whole and 0.23 s in blocks, since the
    32 MiB logits and their gradient never need new pages."""
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, chunk)


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
        joiner = tok.sep_token_id if self.masked else tok.eos_token_id
        self.window = recipe.seq_len - 2 if self.masked else recipe.seq_len
        train, held = split_paragraphs(recipe.corpus)
        self.stream = self._stream(train, joiner)
        held_stream = self._stream(held, joiner)
        n = min(recipe.eval_size, len(held_stream) // self.window)
        if n < 1 or len(self.stream) <= self.window:
            raise ValueError(f"seq_len {recipe.seq_len} is too long for the {recipe.corpus} corpus")
        windows = held_stream[: n * self.window].reshape(n, self.window)
        if self.masked:  # a small held-out text is masked several times over, up to eval_size sequences
            windows = np.tile(windows, (max(1, recipe.eval_size // n), 1))
        rng = np.random.default_rng(np.random.SeedSequence([_VALIDATION_TAG]))
        self.validation = self._assemble(windows, rng)
        self.baselines = {"unigram": self._unigram_baseline(), "chance": math.log(self.vocab_size)}
        self.sizes = {"train_tokens": int(len(self.stream)), "validation_tokens": int(len(held_stream)),
                      "validation_windows": int(n), "validation_sequences": int(len(windows))}

    def _stream(self, paragraphs: list[str], joiner: int) -> np.ndarray:
        encoded = self.preprocessor.backend_tokenizer.encode_batch(paragraphs, add_special_tokens=False)
        return np.fromiter((t for para in encoded for t in (*para.ids, joiner)), dtype=np.int64)

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
        return self._assemble(self.stream[starts[:, None] + np.arange(self.window)], rng)

    def _unigram_baseline(self) -> float:
        """Cross-entropy (nats) on the validation targets of the unigram distribution of the training stream
        (add-1/2 smoothed): what a model that ignores context can reach."""
        counts = np.bincount(self.stream, minlength=self.vocab_size).astype(float) + 0.5
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
        images, labels = data_images.synthetic_shapes(recipe.eval_size, recipe.image_size, seed=_VALIDATION_TAG)
        self.validation = self._assemble(images, labels)
        self.baselines = {"chance": math.log(len(data_images.SHAPES))}
        self.sizes = {"validation_images": int(recipe.eval_size)}

    def _assemble(self, images: np.ndarray, labels: np.ndarray) -> dict:
        return {"pixel_values": pixel_values(images, self.preprocessor),
                "labels": torch.as_tensor(labels, dtype=torch.long)}

    def batch(self, step: int) -> dict:
        seed = int(_step_rng(self.recipe.seed, step).integers(2**31 - 1))
        return self._assemble(*data_images.synthetic_shapes(self.recipe.batch_size, self.recipe.image_size, seed=seed))

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


def _task(recipe: Recipe):
    return _TextTask(recipe) if recipe.kind in TEXT_KINDS else _ImageTask(recipe)


# ---- models ----------------------------------------------------------------------------------------------------------

def model_config(recipe: Recipe, vocab_size: int | None = None, special: dict | None = None):
    """The ``transformers`` config of the recipe's architecture."""
    from transformers import BertConfig, GPT2Config, ResNetConfig, ViTConfig

    r, special = recipe, special or {}
    attn = {"attn_implementation": _attn_implementation(r)}
    labels = {"num_labels": len(data_images.SHAPES), "id2label": dict(enumerate(data_images.SHAPES)),
              "label2id": {s: i for i, s in enumerate(data_images.SHAPES)}}
    if r.kind in BERT_KINDS:
        return BertConfig(vocab_size=vocab_size, hidden_size=r.width, num_hidden_layers=r.depth,
                          num_attention_heads=r.heads, intermediate_size=4 * r.width,
                          max_position_embeddings=r.seq_len, position_embedding_type=r.positions,
                          hidden_dropout_prob=r.dropout,
                          attention_probs_dropout_prob=r.dropout, **special, **attn)
    if r.kind == "clm":
        # GPT-2's own tanh approximation of GELU, as one fused kernel ("gelu_new" computes the same function in five
        # element-wise passes: 16% of an update of the local recipe)
        return GPT2Config(vocab_size=vocab_size, n_positions=r.seq_len, n_embd=r.width, n_layer=r.depth,
                          n_head=r.heads, resid_pdrop=r.dropout, embd_pdrop=r.dropout, attn_pdrop=r.dropout,
                          activation_function="gelu_pytorch_tanh", **special, **attn)
    if r.kind == "vit":
        return ViTConfig(image_size=r.image_size, patch_size=r.patch_size, hidden_size=r.width,
                         num_hidden_layers=r.depth, num_attention_heads=r.heads, intermediate_size=4 * r.width,
                         hidden_dropout_prob=r.dropout, attention_probs_dropout_prob=r.dropout, **labels, **attn)
    return ResNetConfig(embedding_size=r.width, hidden_sizes=[r.width * 2**i for i in range(r.depth)],
                        depths=[1] * r.depth, layer_type="basic", **labels)


def _attn_implementation(recipe: Recipe) -> str:
    # BERT's sdpa path has no relative positions (it falls back to eager, with a warning, at every call)
    return "eager" if recipe.positions != "absolute" else ATTENTION_VARIANTS[recipe.attention_variant]


def _model_class(kind: str):
    import transformers

    name = {"mlm": "BertForMaskedLM", "char-mlm": "BertForMaskedLM", "clm": "GPT2LMHeadModel",
            "vit": "ViTForImageClassification", "cnn": "ResNetForImageClassification"}[kind]
    return getattr(transformers, name)


def build_model(recipe: Recipe, task=None):
    """The recipe's model at initialisation (step 0), drawn from ``torch.manual_seed(recipe.seed)``."""
    special = {}
    vocab = None
    if recipe.kind in TEXT_KINDS:
        tok = task.preprocessor if task is not None else tokenizer(recipe)
        vocab = len(tok)
        special = {"pad_token_id": tok.pad_token_id}
        if recipe.kind == "clm":
            special.update(bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    config = model_config(recipe, vocab, special)
    torch.manual_seed(recipe.seed)
    model = _model_class(recipe.kind)(config)
    if recipe.attention_variant != "standard":
        from .attention_variants import apply_attention_variant

        apply_attention_variant(model, recipe.attention_variant)
    return model


def _load_model(recipe: Recipe, folder: Path):
    kwargs = {} if recipe.kind == "cnn" else {"attn_implementation": _attn_implementation(recipe)}
    if recipe.attention_variant != "standard":
        from .attention_variants import from_pretrained

        return from_pretrained(_model_class(recipe.kind), folder, **kwargs)
    return _model_class(recipe.kind).from_pretrained(folder, **kwargs)


# ---- the training loop -----------------------------------------------------------------------------------------------

def _optimizer(recipe: Recipe, model) -> torch.optim.Optimizer:
    """AdamW; biases, LayerNorm/BatchNorm weights and embeddings of positions are not decayed."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        (plain if p.ndim < 2 or "position" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, 0.98), eps=1e-6)


def _save(folder: Path, model, task, state: dict, optimizer=None) -> None:
    def write(tmp: Path):
        model.save_pretrained(tmp)
        task.preprocessor.save_pretrained(tmp)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "training_state.json").write_text(json.dumps(state, indent=1))  # written last: marks completeness

    if folder.exists() and folder.name.startswith("resume-"):
        shutil.rmtree(folder)
    paths.atomic_folder(folder, write)


def _resumable(run: Path) -> Path | None:
    """The newest folder (checkpoint or snapshot) holding model, optimiser and state."""
    best = None
    for folder in [*run.glob("step-*"), *run.glob("resume-*")]:
        if (folder / "optimizer.pt").is_file() and (folder / "training_state.json").is_file():
            if best is None or _step_of(folder) > _step_of(best):
                best = folder
    return best


def _drop_old_optimizer_states(run: Path, keep: Path) -> None:
    for folder in [*run.glob("step-*"), *run.glob("resume-*")]:
        if folder == keep:
            continue
        if folder.name.startswith("resume-"):
            shutil.rmtree(folder, ignore_errors=True)
        elif (folder / "optimizer.pt").is_file():
            (folder / "optimizer.pt").unlink()


@contextmanager
def _threads(n: int | None):
    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _fresh_state(recipe: Recipe, task, threads: int) -> dict:
    """The ``training_state.json`` of step 0; the loss lists grow along the run (train_loss[i] is update i + 1)."""
    import transformers

    return {"step": 0, "suite": recipe.suite, "seed": recipe.seed, "recipe": asdict(recipe),
            "recipe_hash": recipe.hash, "checkpoint_steps": list(recipe.checkpoint_steps),
            "baselines": task.baselines, "data": task.sizes, "train_loss": [], "validation": [],
            "seconds": 0.0, "cpu_seconds": 0.0, "threads": threads,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "trainer": fingerprint.trainer()},
            "rng": "update k draws its batch, masks and dropout from SeedSequence([seed, k])"}


def train(recipe: Recipe, out_dir: str | Path | None = None, progress: bool = True,
          snapshot_every_s: float = 300.0, threads: int | None = None, stop_after: int | None = None
          ) -> list[Checkpoint]:
    """Train ``recipe`` (or resume it, or reuse it if already trained) and return its checkpoints by step.

    ``out_dir`` replaces ``cache_dir()/checkpoints`` as the root of the suites. Besides the checkpoints, a resumable
    snapshot is written every ``snapshot_every_s`` seconds of training. ``stop_after`` stops after that many updates
    (as an interruption would; for tests and for spreading a long run over sessions). ``threads`` defaults to
    ``recipe.threads``; another count trains correctly but not bit-identically to the recipe's (it is recorded in
    ``training_state.json``).
    """
    run = run_dir(recipe, out_dir)
    if is_trained(recipe, out_dir):
        return checkpoints(recipe, out_dir)
    device = torch.device(recipe.device)
    task = _task(recipe)
    ckpt_steps, eval_steps = set(recipe.checkpoint_steps), set(recipe.eval_steps)
    # the cores this process may use: torch's own default can exceed a container's quota
    threads = threads or recipe.threads or executor.cores()
    with _threads(threads), torch.random.fork_rng(
            devices=[device] if device.type == "cuda" else []):
        resume = _resumable(run)
        if resume is not None:
            state = json.loads((resume / "training_state.json").read_text())
            model = _load_model(recipe, resume).to(device)
            optimizer = _optimizer(recipe, model)
            optimizer.load_state_dict(torch.load(resume / "optimizer.pt", map_location=device, weights_only=True))
        else:
            model = build_model(recipe, task).to(device)
            optimizer = _optimizer(recipe, model)
            state = _fresh_state(recipe, task, threads)
        model.train()
        start, clock, cpu_clock = state["step"], time.perf_counter(), time.process_time()
        last_snapshot, seconds0, cpu_seconds0 = clock, state["seconds"], state.get("cpu_seconds", 0.0)

        def checkpoint_state(step: int) -> dict:
            # wall seconds, and CPU seconds of this process (all its threads): on a shared machine the second is
            # the better guide to what an unloaded one would take
            return {**state, "step": step, "seconds": round(seconds0 + time.perf_counter() - clock, 3),
                    "cpu_seconds": round(cpu_seconds0 + time.process_time() - cpu_clock, 3)}

        def validate(step: int) -> None:
            model.eval()
            with torch.no_grad():
                state["validation"].append({"step": step, **task.evaluate(model, device)})
            model.train()

        if start == 0 and not state["validation"]:
            validate(0)
            folder = run / "step-0"
            _save(folder, model, task, checkpoint_state(0), optimizer)
        last = recipe.steps if stop_after is None else min(recipe.steps, start + stop_after)
        bar = _progress_bar(recipe, start, progress)
        for step in range(start + 1, last + 1):
            seed = int(np.random.SeedSequence([recipe.seed, step]).generate_state(1)[0])
            torch.manual_seed(seed)  # dropout of this update
            for group in optimizer.param_groups:
                group["lr"] = recipe.lr_at(step)
            batch = {k: v.to(device) for k, v in task.batch(step).items()}
            loss = task.loss(model, batch)
            loss.backward()
            if recipe.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state["train_loss"].append(float(loss.detach()))
            if step in eval_steps:
                validate(step)
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(state['train_loss'][-20:]):.3f}",
                            val=f"{state['validation'][-1]['loss']:.3f}", refresh=False)
            if step in ckpt_steps:
                folder = run / f"step-{step}"
                _save(folder, model, task, checkpoint_state(step), optimizer)
            elif step == last or time.perf_counter() - last_snapshot > snapshot_every_s:
                folder = run / f"resume-{step}"
                _save(folder, model, task, checkpoint_state(step), optimizer)
            else:
                continue
            _drop_old_optimizer_states(run, keep=folder)
            last_snapshot = time.perf_counter()
        bar.close()
    return checkpoints(recipe, out_dir)


def cost(recipe: Recipe) -> float:
    """A rough relative cost of training ``recipe`` (multiply-adds of its updates), to start the longest runs first."""
    r = recipe
    if r.kind == "cnn":
        return r.steps * r.batch_size * r.image_size**2 * r.width**2 * r.depth
    length = (r.image_size // r.patch_size) ** 2 + 1 if r.kind == "vit" else r.seq_len
    return r.steps * r.batch_size * length * r.depth * (12 * r.width**2 + 2 * length * r.width)


def _train_quietly(job: tuple) -> list[Checkpoint]:
    """One run of ``train_many`` in a worker process: the recipe's own thread count, no progress bar."""
    recipe, out_dir = job
    return train(recipe, out_dir=out_dir, progress=False)


def train_many(recipe_list, out_dir: str | Path | None = None, workers: int | None = None,
               progress: bool = True) -> dict[Recipe, list[Checkpoint]]:
    """Train every recipe not yet trained, in parallel worker processes (``executor.map``: one run per process, each
    with its recipe's thread count), the costliest first; return ``{recipe: checkpoints}`` for all of them.

    A run's weights depend on its recipe only (the batch, masks and dropout of update k are drawn from (seed, k)), so
    a parallel run ends bit-identical to a serial one (``tests/test_training.py``). What the runs share (the corpus,
    the tokenizers) is prepared here first, once. ``workers`` defaults to the cores (``executor.cores()``); 1 trains
    here, one run after another. ``progress`` prints one line per finished run (bars from several processes would
    interleave)."""
    recipe_list = list(recipe_list)
    todo = sorted((r for r in recipe_list if not is_trained(r, out_dir)), key=cost, reverse=True)
    for r in todo:
        if r.kind in TEXT_KINDS:
            tokenizer(r)  # trained once here rather than raced for by the workers
    started = time.perf_counter()

    def done(job, found: list[Checkpoint]) -> None:
        if progress and found:
            state = training_state(found[-1])
            print(f"trained {job[0].suite} seed {job[0].seed}: {state['step']} updates, final validation loss "
                  f"{found[-1].loss:.3f}, {state['seconds']:.0f} s ({state['cpu_seconds']:.0f} s CPU) "
                  f"[{time.perf_counter() - started:.0f} s since the start]", file=sys.stderr, flush=True)

    if todo:
        n = min(workers or executor.cores(), len(todo))
        if progress:
            print(f"training {len(todo)} run(s) on {n} worker process(es): "
                  f"{', '.join(f'{r.suite} seed {r.seed}' for r in todo)}", file=sys.stderr, flush=True)
        executor.map(_train_quietly, [(r, out_dir) for r in todo], workers=n, on_done=done)
    return {r: checkpoints(r, out_dir) for r in recipe_list}


def _progress_bar(recipe: Recipe, start: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=recipe.steps, initial=start, desc=f"{recipe.suite} seed {recipe.seed}", disable=not enabled,
                mininterval=5.0, file=sys.stderr, leave=True)


# ---- reading trained suites back -------------------------------------------------------------------------------------

def loss_curves(recipe_list: list[Recipe], out_dir: str | Path | None = None):
    """Tidy frame of the trained runs' losses: columns suite, kind, seed, step, split (train / validation), loss,
    accuracy (vision validation only)."""
    import pandas as pd

    rows = []
    for recipe in recipe_list:
        done = checkpoints(recipe, out_dir)
        if not done:
            continue
        state = training_state(done[-1])
        base = {"suite": recipe.suite, "kind": recipe.kind, "seed": recipe.seed}
        rows += [{**base, "step": i + 1, "split": "train", "loss": v} for i, v in enumerate(state["train_loss"])]
        rows += [{**base, "split": "validation", **v} for v in state["validation"]]
    return pd.DataFrame(rows)


def summary(recipe_list: list[Recipe], out_dir: str | Path | None = None):
    """One row per trained run: final validation loss (and accuracy), baselines, parameter count, wall seconds."""
    import pandas as pd

    rows = []
    for recipe in recipe_list:
        done = checkpoints(recipe, out_dir)
        if not done:
            continue
        state = training_state(done[-1])
        final = state["validation"][-1]
        config = json.loads((done[-1].path / "config.json").read_text())
        rows.append({"suite": recipe.suite, "kind": recipe.kind, "seed": recipe.seed, "steps": state["step"],
                     "architecture": config["architectures"][0], "parameters": _count_parameters(done[-1].path),
                     "final_loss": final["loss"], "accuracy": final.get("accuracy"),
                     # the training loss at the end: mean over the last 5% of updates (at least 10)
                     "final_train_loss": float(np.mean(state["train_loss"][-max(10, state["step"] // 20):])),
                     "initial_loss": state["validation"][0]["loss"],
                     "unigram": state["baselines"].get("unigram"), "chance": state["baselines"]["chance"],
                     "train_tokens": state.get("data", {}).get("train_tokens"),
                     "threads": state.get("threads"),
                     "seconds": state["seconds"], "cpu_seconds": state.get("cpu_seconds"),
                     "checkpoints": len(done)})
    return pd.DataFrame(rows)


def corpus_summary(corpus: str) -> dict:
    """What a text corpus of the recipes is: ``description``, paragraphs, characters and (docstrings) documents of its
    train and validation splits, its ``content_hash`` (what the recipe hashes hold) and the ``packages`` it was read
    from (docstrings: name -> version)."""
    train, held = split_paragraphs(corpus)
    out = {"corpus": corpus, "description": data.SOURCES[corpus].description if corpus in data.SOURCES else corpus,
           "train_paragraphs": len(train), "validation_paragraphs": len(held),
           "train_chars": sum(map(len, train)), "validation_chars": sum(map(len, held)),
           "content_hash": _data_fingerprint("mlm", 0, corpus), "packages": {}, "train_documents": None,
           "validation_documents": None}
    if corpus == "docstrings":
        found = data_docstrings.docstring_corpus()
        out.update(content_hash=found.content_hash, packages=dict(found.packages),
                   train_documents=found.documents["train"], validation_documents=found.documents["validation"])
    return out


def _count_parameters(folder: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return int(sum(np.prod(f.get_slice(k).get_shape()) for k in f.keys()))


def checkpoint_table(recipe_list: list[Recipe], out_dir: str | Path | None = None):
    """Tidy frame of every saved checkpoint: suite, seed, step, validation loss, folder ("cache:..." inside the
    checkpoint cache, so the table is the same in every checkout)."""
    import pandas as pd

    from . import results

    return pd.DataFrame([{"suite": c.suite, "seed": c.seed, "step": c.step, "loss": c.loss, "path": results.checkpoint_key(c.path)["folder"]}
                         for r in recipe_list for c in checkpoints(r, out_dir)])


__all__ = ["Recipe", "Checkpoint", "recipes", "suite", "suite_specs", "suite_checkpoints", "train", "train_many",
           "cost", "corpus_summary", "checkpoints",
           "is_trained", "training_state", "tokenizer", "image_processor", "build_model", "model_config",
           "loss_curves", "summary", "checkpoint_table", "split_paragraphs"]
