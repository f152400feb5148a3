"""The recipe of a self-trained model and what it determines: a ``Recipe`` fixes everything the weights depend on
(kind, sizes, optimiser, steps, seed, attention variant, positions, corpus), a suite is one recipe per seed (read from
a profile's ``checkpoint_suites`` chapter), and a recipe builds its own data split, tokenizer or image processor and
model at initialisation (or read back from a checkpoint folder).

Kinds: ``mlm`` (BertForMaskedLM, WordPiece), ``clm`` (GPT2LMHeadModel, byte-level BPE), ``char-mlm`` (BertForMaskedLM
over bytes), ``vit`` (ViTForImageClassification on ``data.images.synthetic_shapes``), ``cnn`` (ResNetForImageClassification).
Precision: float32 throughout, or mixed (``precision``: the forward pass under autocast in float16, with a gradient
scaler, or bfloat16; the weights and the optimiser in float32), float16 by default on CUDA.
What a run optimises lives in ``training.tasks``, its checkpoints on disk in ``training.checkpoints``, the loop in
``training``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from anisotropy.data import docstrings, images, prose, wikipedia
from anisotropy import compat, fingerprint, paths, profiles
from anisotropy.models import attention_variants, offline_tokenizers, relative_positions

KINDS = ("mlm", "clm", "char-mlm", "vit", "cnn")
TEXT_KINDS = ("mlm", "clm", "char-mlm")
BERT_KINDS = ("mlm", "char-mlm")  # BertForMaskedLM: the kinds with attention variants and relative positions
# The attention block of the transformer kinds. Each variant names the `transformers` attention implementation the
# model runs with; the ablation chapter's variants (issue 11, ``models.attention_variants``) change how queries and keys
# enter the scores, run eager attention, and are installed by ``models.attention_variants.apply_attention_variant``.
ATTENTION_VARIANTS = {"standard": "sdpa", "qk_norm": "eager", "centred": "eager", "temperature": "eager"}
# Position information of the BERT kinds: learnt absolute embeddings (BERT's own), or learnt embeddings of the
# distance between query and key, met by the query (Shaw et al. 2018; `transformers`' "relative_key") or by the
# query and the key ("relative_key_query", Huang et al. 2020).
# Measured (issue 17, benchmarks/results/recipes.jsonl): with absolute positions the best subword encoder of the sweep
# ended 0.64 nats below the unigram baseline after 2,400 updates; with relative ones, 1.3-1.7 nats below after 800.
POSITIONS = ("absolute", "relative_key", "relative_key_query")
# The dtype of the forward pass (autocast; "float32": none). "auto" is float16 on CUDA (a T4's tensor cores; no
# bfloat16 there) and float32 elsewhere, so the CPU-trained suites stay in float32.
PRECISIONS = ("float32", "float16", "bfloat16")
VALIDATION_EVERY = 10  # every 10th prose paragraph is held out for the validation loss
# Text corpora: the docstring prose of the installed packages (local profile: millions of tokens, offline, keyed by
# its content hash), the Python reference's prose (50k tokens: small tests), or WikiText-103 (train / validation
# splits; paper profile, needs the Hub or its cache).
CORPORA = ("docstrings", "prose", "wikitext-103")
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
GPT_SPECIALS = ("<|endoftext|>", "<|pad|>")


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
    thread is also the fastest choice on a loaded 2-core machine (two threads spin against each other there).
    ``precision``: ``PRECISIONS``, or "auto" (float16 when ``device`` is CUDA, else float32), resolved here, so a
    recipe and its training record name the precision it trains in."""

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
    precision: str = "auto"

    def __post_init__(self):
        if self.precision == "auto":
            object.__setattr__(self, "precision", "float16" if str(self.device).startswith("cuda") else "float32")
        if self.precision not in PRECISIONS:
            raise ValueError(f"Recipe {self.suite!r}: precision must be one of {PRECISIONS} or 'auto', "
                             f"got {self.precision!r}")
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
        """12 hex digits identifying the weights-determining content (every field but ``suite`` and ``seed``;
        ``precision`` only when it is not float32, so the recipes from before mixed precision keep their content),
        the trainer's code (``fingerprint.trainer()``: the trainer's modules, what they compute with, package
        versions) and the training data."""
        content = {k: v for k, v in asdict(self).items()
                   if k not in ("suite", "seed") and (k, v) != ("precision", "float32")}
        payload = {"recipe": content, "trainer": fingerprint.trainer(),
                   "data": data_fingerprint(self.kind, self.image_size, self.corpus)}
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


# ---- data: the corpus split, tokenizers, images ----------------------------------------------------------------------

@lru_cache(maxsize=None)
def data_fingerprint(kind: str, image_size: int, corpus: str = "prose") -> str:
    """12 hex digits naming the training data of ``kind`` (part of the recipe hash and of the tokenizer's name)."""
    if kind in TEXT_KINDS and corpus == "docstrings":
        blob = f"docstrings {docstrings.docstring_corpus().content_hash}".encode()  # its content, not the packages' names
    elif kind in TEXT_KINDS and corpus != "prose":
        blob = corpus.encode()  # a published, fixed dataset: its name identifies it
    elif kind in TEXT_KINDS:
        blob = prose.prose_corpus().encode()
    else:
        blob = images.synthetic_shapes(4, image_size, seed=0)[0].tobytes()
    return hashlib.sha256(blob).hexdigest()[:12]


def paragraph_batches(corpus: str, split: str):
    """The paragraphs of one split (``train`` or ``validation``) of ``corpus`` in ``split_paragraphs``'s order, a
    list at a time: WikiText-103 streamed from its Arrow files (its train split is ~540 MB of text), the small corpora
    in one list."""
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    if corpus == "wikitext-103":
        yield from wikipedia.wikitext_line_batches(split)
    else:
        yield split_paragraphs(corpus)[split == "validation"]


@lru_cache(maxsize=2)
def split_paragraphs(corpus: str = "prose") -> tuple[list[str], list[str]]:
    """(train, validation) paragraphs. Prose: every ``VALIDATION_EVERY``-th distinct paragraph is held out.
    Docstrings: the corpus's own split by document (``data.docstrings.docstring_corpus``). WikiText-103: its train and
    validation splits (lines of >= 80 characters, headings dropped)."""
    if corpus == "wikitext-103":
        return wikipedia.wikitext_lines("train"), wikipedia.wikitext_lines("validation")
    if corpus == "docstrings":  # deduplicated and split by document when extracted
        found = docstrings.docstring_corpus()
        return list(found.train), list(found.validation)
    # pydoc repeats some paragraphs under several topics: deduplicate first, or the held-out text leaks into training
    paragraphs = list(dict.fromkeys(prose.prose_paragraphs()))
    train = [p for i, p in enumerate(paragraphs) if i % VALIDATION_EVERY != VALIDATION_EVERY - 1]
    held = [p for i, p in enumerate(paragraphs) if i % VALIDATION_EVERY == VALIDATION_EVERY - 1]
    return train, held


def _build_tokenizer(kind: str, vocab_size: int, seq_len: int, corpus: str = "prose"):
    """A ``PreTrainedTokenizerFast`` trained on the training paragraphs (``char-mlm``: the 256 bytes, no training)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    def train_text():  # streamed, a fresh pass each call
        return (p for batch in paragraph_batches(corpus, "train") for p in batch)

    if kind == "clm":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        # a fixed initial alphabet (all 256 bytes) makes the BPE trainer deterministic
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(GPT_SPECIALS), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(train_text(), trainer)
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=GPT_SPECIALS[0], eos_token=GPT_SPECIALS[0],
                                       pad_token=GPT_SPECIALS[1], model_max_length=seq_len,
                                       # GPT-2 adds wte(token_type_ids) to its inputs: never hand it type ids
                                       model_input_names=["input_ids", "attention_mask"])
    if kind == "mlm":
        tok = offline_tokenizers.train_wordpiece(train_text, vocab_size, BERT_SPECIALS)
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
        f"{recipe.kind}-v{vocab}-len{recipe.seq_len}-{recipe.corpus}-{data_fingerprint(recipe.kind, 0, recipe.corpus)}"
        f"-t{fingerprint.trainer()}")
    if not (folder / "tokenizer.json").is_file():
        paths.atomic_folder(folder, lambda tmp: _build_tokenizer(recipe.kind, vocab, recipe.seq_len, recipe.corpus)
                            .save_pretrained(tmp))
    return PreTrainedTokenizerFast.from_pretrained(folder)


def image_processor(recipe: Recipe):
    """Resize to ``image_size`` and map pixel values to [-1, 1] (per channel ``(x / 255 - 0.5) / 0.5``)."""
    size = {"height": recipe.image_size, "width": recipe.image_size}
    return compat.image_processor("ViTImageProcessor")(do_resize=True, size=size, do_rescale=True,
                                                       rescale_factor=1 / 255, do_normalize=True,
                                                       image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


def pixel_values(pixels: np.ndarray, processor) -> torch.Tensor:
    """What ``processor`` (``image_processor``) makes of uint8 images ``pixels`` (n, h, w, 3) already at its size: rescaled and
    normalised per channel, channels first, float32. Computed directly: the processor's per-image loop (its resize
    is the identity here) took a tenth of each update of the local ViT recipe."""
    size = processor.size
    if pixels.shape[1:3] != (size["height"], size["width"]):
        return processor(images=list(pixels), return_tensors="pt")["pixel_values"]
    mean = np.asarray(processor.image_mean, dtype=np.float32)
    std = np.asarray(processor.image_std, dtype=np.float32)
    scaled = pixels.astype(np.float32) * np.float32(processor.rescale_factor)
    return torch.from_numpy(np.ascontiguousarray(((scaled - mean) / std).transpose(0, 3, 1, 2)))


# ---- models ----------------------------------------------------------------------------------------------------------

def model_config(recipe: Recipe, vocab_size: int | None = None, special: dict | None = None):
    """The ``transformers`` config of the recipe's architecture."""
    from transformers import BertConfig, GPT2Config, ResNetConfig, ViTConfig

    r, special = recipe, special or {}
    attn = {"attn_implementation": _attn_implementation(r)}
    labels = {"num_labels": len(images.SHAPES), "id2label": dict(enumerate(images.SHAPES)),
              "label2id": {s: i for i, s in enumerate(images.SHAPES)}}
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


def model_class(kind: str):
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
    model = model_class(recipe.kind)(config)
    if recipe.positions != "absolute":  # transformers 5 no longer computes them itself (a no-op under 4)
        relative_positions.install(model)
    if recipe.attention_variant != "standard":
        attention_variants.apply_attention_variant(model, recipe.attention_variant)
    return model


def load_model(recipe: Recipe, folder: Path):
    """The recipe's model read from a checkpoint ``folder``, with its attention variant and implementation."""
    kwargs = {} if recipe.kind == "cnn" else {"attn_implementation": _attn_implementation(recipe)}
    if recipe.attention_variant != "standard" or recipe.positions != "absolute":
        return attention_variants.from_pretrained(model_class(recipe.kind), folder, **kwargs)
    return model_class(recipe.kind).from_pretrained(folder, **kwargs)
