"""The plan's memory formulas (``anisotropy.pages.budget``) against what the code allocates at real sizes, on the CPU
(issue 55): the host memory of preparing a training corpus (``training.tasks``, in a fresh process: its peak resident
set, VmHWM), the activations of a forward pass of two true-size models at the paper profile's batch shapes, one
training update of the ablation's paper recipe, and the arrays of two chapters that compute without a model.

Allocations are counted with torch's profiler (every CPU allocation and free it records, in time order) where torch
allocates, and with tracemalloc where NumPy does: what the same code would hold on a GPU is torch's allocations, not
the resident set, which also holds the C library's caches and BLAS workspaces. The margins are stated per test."""

import json
import os
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from anisotropy.chapters import appendix_b_isotropic, p1_s4_untrained_block, plans
from anisotropy.pages import budget

from conftest import PYTHON, run_guarded

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def torch_peak(fn) -> int:
    """The most bytes torch allocated at once on the CPU while ``fn`` ran, beyond what it held before."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    return int(np.cumsum([b for _, b in events]).max())


# ---- preparing a training corpus ------------------------------------------------------------------------------------

PREPARE = textwrap.dedent("""
    import json, re, sys
    import numpy as np
    from anisotropy.data import prose
    from anisotropy.training import recipes, tasks

    kind, chars = sys.argv[1], int(sys.argv[2])
    words = re.findall(r"\\S+", " ".join(prose.prose_paragraphs()))
    rng = np.random.default_rng(0)
    para = lambda n: " ".join(words[i] for i in rng.integers(0, len(words), n))  # noqa: E731
    train, total = [], 0
    while total < chars:  # paragraphs of 40-160 words of the offline prose, drawn at random
        train.append(para(int(rng.integers(40, 160))))
        total += len(train[-1])
    held = [para(100) for _ in range(200)]
    recipes.split_paragraphs = tasks.split_paragraphs = lambda corpus="prose": (train, held)
    recipe = recipes.Recipe(suite="x", kind=kind, vocab_size=8192, seq_len=128, eval_size=16)
    if kind != "char-mlm":
        recipes.tokenizer(recipe)  # trained first, as train_many does before its workers prepare their data
    status = lambda: {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in open("/proc/self/status"))
                      if k in ("VmRSS", "VmHWM")}
    open("/proc/self/clear_refs", "w").write("5")  # the peak from here on
    before = status()["VmRSS"]
    task = tasks.task_for(recipe)
    print(json.dumps({"chars": total, "tokens": task.sizes["train_tokens"], "peak": status()["VmHWM"] - before}))
""")


def prepare(kind: str, chars: int, cache: Path) -> dict:
    """Prepare a synthetic corpus of ``chars`` characters for a recipe of ``kind`` in a fresh process (its own
    checkpoint cache): its characters, tokens and the peak resident-set growth of ``training.tasks.task_for``."""
    proc = run_guarded([PYTHON, "-c", PREPARE, kind, str(chars)], expected_s=10 + chars / 4e5, capture_output=True,
                       text=True, env={**os.environ, "ANISOTROPY_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc to reset VmHWM")
@pytest.mark.parametrize("kind, chars", [("char-mlm", 4_000_000), ("char-mlm", 16_000_000), ("clm", 8_000_000)])
def test_the_preparation_formula_follows_the_measured_peak(kind, chars, tmp_path):
    """``budget.preparation_bytes`` (less the paragraphs, which exist before ``task_for`` runs here) against the
    peak resident-set growth of ``training.tasks.task_for`` on corpora of 4 to 16 MB: byte-level (a token a character)
    at two sizes 4x apart, and byte-level BPE (8,192 tokens). The formula counts the characters and tokens the
    preparation tokenizes at once (the whole corpus, or one chunk of ``training.tokens.CHUNK_CHARS`` characters) and,
    chunked, the token array's pages, which the resident set counts once training reads the memory-mapped file; at
    WikiText-103's 546 MB a whole-corpus preparation is the same arithmetic, beyond a Colab runtime, and a chunked one
    stays at one chunk's. Bounds: measured <= formula + 16 MiB (the allocator's arenas and the pages of the libraries
    it touches first) and formula <= 1.25 x measured: the formula's bytes a token are the largest of the runs that
    fitted it, so a run may hold up to a fifth less."""
    found = prepare(kind, chars, tmp_path / "cache")
    chunk = plans.preparation_chunk()
    share = 1.0 if chunk is None or found["chars"] <= chunk else chunk / found["chars"]
    formula = budget.encoding_bytes(share * found["chars"], share * found["tokens"], chunked=chunk is not None)
    if chunk is not None:  # the token array's pages: uint16 ids (261 byte-level ids or 8,192 BPE ones), a token each
        formula += 2 * found["tokens"]
    assert found["peak"] <= formula + 16 * MIB, (found, formula)
    assert formula <= 1.25 * found["peak"], (found, formula)
    # byte-level: one token a character (ASCII prose), as corpus_tokens counts it
    if kind == "char-mlm":
        assert found["tokens"] == pytest.approx(found["chars"], rel=0.01)
    else:  # a byte-level BPE of 8,192 tokens on English prose gives fewer tokens than CHARS_PER_TOKEN assumes
        assert found["tokens"] <= found["chars"] / budget.CHARS_PER_TOKEN


def test_the_paragraph_bytes_are_what_python_holds_for_them():
    """``TEXT_BYTES_PER_CHAR``: an ASCII str of n characters takes n + 49 bytes (its header and terminator), plus 8
    for the list's pointer; for paragraphs of ~300 characters (WikiText-103's lines of 80 or more) that is within
    1.15 bytes a character."""
    lines = ["x" * n for n in np.random.default_rng(0).integers(80, 1000, 2000)]
    held = sum(sys.getsizeof(s) + 8 for s in lines)
    assert held <= budget.TEXT_BYTES_PER_CHAR * sum(map(len, lines)) <= 1.25 * held
    from anisotropy.training import recipes

    assert budget.CORPUS_CHARS["prose"] == sum(map(len, recipes.split_paragraphs("prose")[0]))


# ---- a forward pass of two true-size models --------------------------------------------------------------------------

def _paper_checkpoint(chapter: str, model: str) -> budget.Checkpoint:
    p = plans.plan(chapter, plans.parameters(chapter, "paper"), "paper")
    return next(c for c in p.checkpoints if c.model == model)


@pytest.mark.slow
@pytest.mark.parametrize("chapter, model", [("p1_s3_token_level", "bert-base-uncased"),
                                            ("p2_layer_profiles", "gpt2-medium")])
def test_forward_activations_at_the_paper_batch_shapes(chapter, model):
    """``budget.forward_bytes`` (the activation term of the GPU memory a checkpoint's measurement needs) against
    torch's allocations during one forward pass of the registry's true-size model with random weights (variant
    "untrained"), with every hidden state returned as ``measure.taps`` asks, at the batch shape the paper profile
    gives it: BERT-base on 32 texts of 256 tokens (the token-level page), GPT-2-medium on 8 windows of enwik8 (147
    tokens; Paper 2's pages), in float32 on the CPU (the formula scales with the dtype's bytes). What the formula
    counts: the hidden states of every layer kept, GPT-2's keys and values cached (``use_cache``), one block's
    transients (GPT-2's tanh GELU keeps four MLP-wide tensors alive, BERT's one-pass GELU two). Bounds: measured <=
    formula <= 1.25 x measured (the formula's four d-wide transients are at most what either model holds)."""
    from anisotropy.models import registry

    c = _paper_checkpoint(chapter, model)
    loaded = registry.load(model, variant="untrained")
    ids = torch.randint(100, 1000, (c.batch, c.positions), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.inference_mode():
        loaded.model(**{k: v[:1, :8] for k, v in inputs.items()}, output_hidden_states=True)  # first-call caches

        def forward():
            out = loaded.model(**inputs, output_hidden_states=True)
            assert len(out.hidden_states) == budget._shape(model)[1] + 1

        measured = torch_peak(forward)
    formula = budget.forward_bytes(model, c.batch, c.positions, "float32")
    assert measured <= formula <= 1.25 * measured, (model, measured / MIB, formula / MIB)


# ---- one training update of the ablation's paper recipe --------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("variant", ["standard", "qk_norm"])
def test_a_training_update_of_the_ablation_recipe(variant):
    """``budget.training_gpu_bytes`` against one AdamW update (forward, the fused loss, backward, the step) of the
    paper profile's ablation recipe (8 layers, 512 wide, 16,384 tokens, 128 positions) with its attention variant, at
    a batch of 8 on the CPU in float32: the second update, once AdamW's moments exist, as every later one. Held before
    it: the weights and the two moments (12 P bytes); allocated during it: the gradients (4 P), the activations kept
    for the backward pass (SDPA's fused path for the standard variant, eager scores and softmax for qk_norm) and the
    loss's chunks. Bounds: measured <= formula <= 1.3 x measured, for the update's own allocations and for the whole
    (the formula's per-position bytes are Korthikanti et al.'s count, which keeps a few tensors torch frees early)."""
    from anisotropy import profiles
    from anisotropy.training import recipes, tasks, trainer

    spec = dict(profiles.chapter_parameters("paper", "beyond_sharp_without_anisotropy")["recipe"], batch_size=8,
                device="cpu", attention_variant=variant)
    recipe = recipes.Recipe(suite="ablation", **spec)

    class Vocabulary:  # what build_model reads of a tokenizer: its size and padding id
        pad_token_id = 0

        def __len__(self):
            return spec["vocab_size"]

    model = recipes.build_model(recipe, type("Task", (), {"preprocessor": Vocabulary()})())
    model.train()
    optimizer = trainer.make_optimizer(recipe, model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, spec["vocab_size"], (8, spec["seq_len"]), generator=g)
    batch = {"input_ids": ids, "labels": torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, -100)}

    def update():
        tasks.text_loss(model, batch, True).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    update()
    during = torch_peak(update)
    params = sum(p.numel() for p in model.parameters())
    formula = budget.training_gpu_bytes(spec)
    held = 12 * budget.recipe_params(spec)
    assert params == pytest.approx(budget.recipe_params(spec), rel=0.02)  # + biases, norms and positions
    assert during <= formula - held <= 1.3 * during, (during / MIB, (formula - held) / MIB)
    assert 12 * params + during <= formula * 1.02 and formula <= 1.3 * (12 * params + during)


# ---- what two chapters compute without a model -----------------------------------------------------------------------

def test_appendix_b_holds_what_its_formula_says():
    """``appendix_b_isotropic.monte_carlo_bytes`` against tracemalloc's peak (NumPy and pandas register their
    buffers with it) of ``measure.baseline.simulated_cosines`` at 300,000 pairs in three dimensions. Bounds: measured
    <= formula <= 1.1 x measured + the chunk's draws (a dimension's draws fill the chunk only when its pairs do, and
    they peak before the frames are concatenated)."""
    from anisotropy.measure import baseline

    dims, n = [16, 64, 256], 300_000
    tracemalloc.start()
    try:
        baseline.simulated_cosines(dims, n, seed=0)
        measured = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    formula = appendix_b_isotropic.monte_carlo_bytes(dims, n)
    chunk = formula - 24 * n * len(dims)
    assert chunk == 6 * 2**24  # three float32 blocks of half a chunk of 2^24 entries
    assert measured <= formula <= 1.1 * measured + chunk, (measured / MIB, formula / MIB)


@pytest.mark.parametrize("variant", ["post_ln", "gpt2"])
def test_the_untrained_block_holds_what_its_formula_says(variant):
    """``p1_s4_untrained_block.forward_bytes`` against torch's allocations during one ``block_statistics`` call (the
    block's forward with its hooks, then the statistics) at 2 sequences of 128 tokens and 64 query rows, BERT-base's
    block: eager attention (its scores and probabilities), the token-wide tensors and the row statistics. Bounds:
    measured <= formula <= 1.5 x measured (the formula's counts of tensors alive at once are the largest of four
    shapes measured, 2 to 8 sequences of 64 to 512 tokens: 1.22x to 1.47x of the allocations)."""
    from anisotropy.experiments import block

    blocks = block.build(0, variants=(variant,))
    b = blocks[variant]
    x, direction = block.draw_inputs(b.embeddings, 2, 128, 0)
    x = x + 16.0 * direction
    block.block_statistics(b, x[:1, :16], n_rows=8)  # first-call caches
    measured = torch_peak(lambda: block.block_statistics(b, x, n_rows=64))
    formula = p1_s4_untrained_block.forward_bytes(2, 128, 64, gpt2=variant == "gpt2")
    assert measured <= formula <= 1.5 * measured, (variant, measured / MIB, formula / MIB)
