"""What a training run asks of a runtime, from its recipe (``training.recipes.Recipe`` fields, a dict): its
compute (``recipe_flops``, 6 x parameters x tokens), its parameters (``recipe_params``), the dtype it runs in
(``precision``), its peak GPU memory (``training_gpu_bytes``), and its data preparation: the corpora's sizes
(``CORPUS_CHARS``), what tokenizing holds (``preparation_bytes``, ``encoding_bytes``), the token array on disk
(``token_array_gib``) and the time (``preparation_seconds``, ``training_seconds``)."""
from __future__ import annotations

from anisotropy.pages.budget.runtimes import (BYTES, CHARS_PER_TOKEN, CPU_TFLOPS, EFFICIENCY, FREE_GPU, GIB,
                                              gpu_seconds)

# What ``training.tasks`` holds while it prepares a corpus (measured: tests/test_plan_measured.py): the whole training
# split tokenized in one ``encode_batch`` (None), or a fixed number of characters at a time into an on-disk token
# array (issue 55: ``training.tokens.CHUNK_CHARS``, which ``chapters.plans`` reads into each plan's ``chunk_chars``
# where the trainer has it). The default of a plan made without ``chapters.plans``:
PREPARATION_CHUNK_CHARS = None


def recipe_flops(recipe: dict) -> float:
    """Training compute of one recipe: 6 x parameters x tokens (images: patches). It leaves out attention's T x T
    products and the fused loss's recomputed logits: one real update of the clm and vit recipes runs 0.9 to 4/3 of
    it (tests/test_budget.py counts one with torch's FlopCounterMode)."""
    width, depth = recipe.get("width", 128), recipe.get("depth", 4)
    params = 12 * depth * width**2 + recipe.get("vocab_size", 256) * width
    if recipe.get("kind") in ("vit", "cnn"):
        positions = (recipe.get("image_size", 32) // recipe.get("patch_size", 4)) ** 2
    else:
        positions = recipe.get("seq_len", 128)
    return 6.0 * params * positions * recipe.get("batch_size", 16) * recipe.get("steps", 600)


def recipe_params(recipe: dict) -> float:
    """Parameters of a recipe's model as ``recipe_flops`` counts them: 12 d^2 a layer and a vocabulary x d map."""
    width, depth = recipe.get("width", 128), recipe.get("depth", 4)
    return float(12 * depth * width**2 + recipe.get("vocab_size", 256) * width)


# A recipe without ``precision`` trains in ``training.recipes.Recipe``'s default, "auto": float16 autocast on CUDA (a
# T4's tensor cores; its weights and optimiser stay float32), float32 elsewhere.
DEFAULT_PRECISION = "auto"


def precision(recipe: dict) -> str:
    """The dtype a recipe's forward and backward passes run in: its ``precision``, "auto" resolved by its device."""
    value = recipe.get("precision", DEFAULT_PRECISION)
    if value == "auto":
        return "float16" if str(recipe.get("device", "cpu")).startswith("cuda") else "float32"
    return value


def training_positions(recipe: dict) -> int:
    """Positions of one training example: a text window's tokens, a ViT's patches and class token."""
    if recipe.get("kind") == "vit":
        return (recipe.get("image_size", 32) // recipe.get("patch_size", 4)) ** 2 + 1
    return recipe.get("seq_len", 128)


def training_gpu_bytes(recipe: dict) -> float:
    """Peak device bytes of one training run of ``recipe`` (``training.trainer.train``):

    - the weights, their gradients and AdamW's two moments, all float32: 16 x P (P: ``recipe_params``), and under
      half-precision autocast the cast copies of the weights autocast keeps for the forward pass, 2 x P;
    - the activations kept for the backward pass, per position and block, after Korthikanti et al. 2022 ("Reducing
      activation recomputation in large transformer models", Section 4.1: 34 s b h + 5 a s^2 b bytes a layer in
      16-bit with dropout): (16 e + 2) x d bytes, e the bytes of the precision's dtype (2 in float16, 4 in float32;
      the 2: dropout's one-byte masks), and where attention runs eager (an attention variant other than standard,
      relative positions: ``training.recipes.ATTENTION_VARIANTS``) its scores, softmax and dropout: 9 x heads x T
      bytes (the softmax in float32 under autocast); SDPA's fused kernels keep no T x T matrix. The embeddings and
      the output layer count as one block more: batch x T x (depth + 1) x that;
    - the fused loss's logits of one chunk of rows (``training.tasks.linear_cross_entropy``, 256 rows) and their
      softmax, 3 x 256 x vocabulary x 4 bytes;
    - a CNN's feature maps: about ten saved tensors per stage output (convolutions, batch norms, activations),
      e x 10 x batch x width x image_size^2 x 3/8 (the stem's map at half size plus the stages' halving ones).

    Bytes; the CUDA context (about 0.3-0.5 GiB, outside torch's allocator) is left out, as in ``checkpoint_gpu_gib``."""
    params = recipe_params(recipe)
    e = BYTES.get(precision(recipe), 4)
    batch = recipe.get("batch_size", 16)
    states = 16 * params + (2 * params if e == 2 else 0)
    if recipe.get("kind") == "cnn":
        return states + e * 10 * batch * recipe.get("width", 32) * recipe.get("image_size", 32) ** 2 * 3 / 8
    width, depth, heads = recipe.get("width", 128), recipe.get("depth", 4), recipe.get("heads", 4)
    positions = training_positions(recipe)
    eager = (recipe.get("attention_variant", "standard") != "standard"
             or recipe.get("positions", "absolute") != "absolute")
    per_position = (16 * e + 2) * width + (9 * heads * positions if eager else 0)
    loss = 3 * 256 * recipe.get("vocab_size", 256) * 4
    return states + batch * positions * (depth + 1) * per_position + loss


# ---- training data ------------------------------------------------------------------------------------------------

# Characters of each training corpus's training split (``training.recipes.split_paragraphs``): WikiText-103 raw's
# train split is 546,500,949 bytes of text in 1,801,350 lines (the Salesforce/wikitext dataset card); the lines the
# recipes keep (80 characters or more, headings dropped) are most of it, counted whole here. The docstring corpus
# depends on the installed packages (5,977,207 characters in this checkout's environment), the prose is fixed.
CORPUS_CHARS = {"prose": 164_045, "docstrings": 6_000_000, "wikitext-103": 546_500_949}
TEXT_BYTES_PER_CHAR = 1.15  # a list of paragraphs: 1 byte a character and ~57 bytes a Python str (lines of ~300)
# What tokenizing holds, per character of the text encoded and per token it gives (tests/test_plan_measured.py, on the
# 2-core machine): the tokenizer's Encoding objects (ids, type ids, token strings, offsets, masks) and the ids copied
# out of them. All at once into one int64 stream (``training.tasks`` before issue 55): 103-116 bytes a token measured
# on byte-level runs of 4 to 20 MB and BPE runs of 5 to 20 MB. A chunk at a time (``training.tokens.write``): the
# ids also pass through lists of Python ints and two int64 arrays, 141-153 bytes a token of a chunk measured.
ENCODE_BYTES_PER_CHAR = 8.0
ENCODE_BYTES_PER_TOKEN = {"whole": 115.0, "chunked": 160.0}
# Characters a second that preparation tokenizes, training a tokenizer first where the recipe needs one (20 MB in
# 37-42 s on the 2-core machine, byte-level or BPE): a time, not a count, and the roughest number here.
TOKENIZE_CHARS_PER_S = 0.5e6


def corpus_tokens(corpus: str, kind: str) -> float:
    """Tokens the training split of ``corpus`` becomes under a recipe of ``kind``: a byte per character (char-mlm;
    ASCII, most of WikiText), else characters / ``CHARS_PER_TOKEN``."""
    chars = CORPUS_CHARS.get(corpus, 0)
    return chars if kind == "char-mlm" else chars / CHARS_PER_TOKEN


def encoding_bytes(chars: float, tokens: float, chunked: bool = False) -> float:
    """Host bytes of tokenizing ``chars`` characters that give ``tokens`` tokens at once (``ENCODE_BYTES_*``: the
    whole corpus into one stream, or, ``chunked``, one chunk of it into an on-disk array)."""
    return ENCODE_BYTES_PER_CHAR * chars + ENCODE_BYTES_PER_TOKEN["chunked" if chunked else "whole"] * tokens


def preparation_bytes(recipe: dict, chunk_chars: int | None = PREPARATION_CHUNK_CHARS) -> float:
    """Peak host bytes of preparing a text recipe's training data (``training.tasks``): the training split's
    paragraphs held (``TEXT_BYTES_PER_CHAR``) and their tokenization (``encoding_bytes``), of the whole split at once
    (``chunk_chars`` None), or of ``chunk_chars`` characters at a time into an on-disk token array
    (``token_array_gib``), WikiText-103's paragraphs then streamed a batch at a time
    (``training.recipes.paragraph_batches``; the small corpora stay one list). 0 for the image kinds, whose batches
    are drawn fresh. Bytes."""
    if recipe.get("kind") in ("vit", "cnn"):
        return 0.0
    corpus = recipe.get("corpus", "prose")
    chars = CORPUS_CHARS.get(corpus, 0)
    tokens = corpus_tokens(corpus, recipe.get("kind", "mlm"))
    if chunk_chars is None:
        return TEXT_BYTES_PER_CHAR * chars + encoding_bytes(chars, tokens)
    share = min(1.0, chunk_chars / chars) if chars else 1.0
    held = share * chars if corpus == "wikitext-103" else chars
    # and the token array's pages as training reads the memory-mapped file, which the resident set counts (the
    # system may drop them: they are the file's)
    return (TEXT_BYTES_PER_CHAR * held + encoding_bytes(share * chars, share * tokens, chunked=True)
            + token_array_gib(recipe, chunk_chars) * GIB)


def token_array_gib(recipe: dict, chunk_chars: int | None = PREPARATION_CHUNK_CHARS) -> float:
    """Disk of a text recipe's training tokens where they are kept on disk (``chunk_chars`` not None:
    ``training.tokens``): a token each in the smallest unsigned type that holds the vocabulary. GiB."""
    if recipe.get("kind") in ("vit", "cnn") or chunk_chars is None:
        return 0.0
    vocab = 261 if recipe.get("kind") == "char-mlm" else recipe.get("vocab_size", 2048)
    itemsize = 1 if vocab <= 256 else 2 if vocab <= 65536 else 4
    return corpus_tokens(recipe.get("corpus", "prose"), recipe.get("kind", "mlm")) * itemsize / GIB


def preparation_seconds(recipe: dict) -> float:
    """Seconds of preparing a text recipe's training data on the CPU (``TOKENIZE_CHARS_PER_S``); 0 for images."""
    if recipe.get("kind") in ("vit", "cnn"):
        return 0.0
    return CORPUS_CHARS.get(recipe.get("corpus", "prose"), 0) / TOKENIZE_CHARS_PER_S


def training_seconds(recipe: dict, gpu: str | None = FREE_GPU) -> float:
    """Seconds of one training run: its compute (``recipe_flops``) at the rate of its ``precision`` on the ``gpu``
    kind (the CPU's, ``CPU_TFLOPS``, when None) times ``EFFICIENCY``, and its data preparation."""
    flops = recipe_flops(recipe)
    compute = gpu_seconds(flops, precision(recipe), gpu) if gpu else flops / (CPU_TFLOPS * 1e12 * EFFICIENCY)
    return compute + preparation_seconds(recipe)

