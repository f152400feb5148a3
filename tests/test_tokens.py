"""Training text as token arrays on disk (``training.tokens``): the same ids, in the same order, as tokenizing the
whole split at once; a preparation whose peak memory does not grow with the corpus; one array when two workers
prepare it at once."""

from __future__ import annotations

import multiprocessing
import os
import sys
import textwrap

import numpy as np
import pytest

from conftest import run_guarded

from anisotropy.training import recipes as training_recipes, tasks, tokens
from anisotropy.training.recipes import Recipe

TINY = dict(width=32, depth=2, heads=2, seq_len=32, vocab_size=320, batch_size=8, warmup=4, lr=3e-3,
            n_checkpoints=5, eval_every=0, eval_size=16)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))


def whole_split_at_once(preprocessor, paragraphs: list[str], joiner: int) -> np.ndarray:
    """The stream as the trainer built it before token arrays: one ``encode_batch`` of the whole split, each
    paragraph's ids followed by the joiner, as int64."""
    encoded = preprocessor.backend_tokenizer.encode_batch(paragraphs, add_special_tokens=False)
    return np.fromiter((t for para in encoded for t in (*para.ids, joiner)), dtype=np.int64)


@pytest.mark.parametrize("kind", ["mlm", "clm", "char-mlm"])
def test_token_arrays_equal_the_whole_split_tokenized_at_once(kind, tmp_path):
    """Every recipe kind's train and validation streams of the prose corpus equal, element by element, the int64
    stream of one encode_batch over the split; so do they when cut into chunks of 2,000 characters (hundreds of
    chunk boundaries). The unigram counts equal np.bincount of that stream, and the ids are stored in the smallest
    unsigned type of the vocabulary."""
    recipe = Recipe(suite="t", kind=kind, **TINY)
    task = tasks.task_for(recipe)
    tok = task.preprocessor
    joiner = tok.eos_token_id if kind == "clm" else tok.sep_token_id
    train, held = training_recipes.split_paragraphs(recipe.corpus)
    expected = whole_split_at_once(tok, train, joiner)
    assert isinstance(task.stream, np.memmap) and task.stream.dtype == np.uint16  # 261 to 320 ids: above a byte
    np.testing.assert_array_equal(task.stream, expected)
    np.testing.assert_array_equal(task.counts, np.bincount(expected, minlength=len(tok)))
    held_array = tasks.corpus_tokens(recipe.corpus, "validation", tok, joiner)
    np.testing.assert_array_equal(held_array.ids, whole_split_at_once(tok, held, joiner))
    assert task.sizes["train_tokens"] == len(expected)

    small = tmp_path / "chunked"
    small.mkdir()
    tokens.write(small, [train[:300], train[300:]], tok.backend_tokenizer, len(tok), joiner, chunk_chars=2000)
    chunked = tokens.read(small)
    assert chunked.ids.dtype == np.uint16 and chunked.folder == small
    np.testing.assert_array_equal(chunked.ids, expected)


def test_dtype_is_the_smallest_that_holds_the_vocabulary():
    assert [tokens.dtype_for(v) for v in (2, 256, 257, 65_536, 65_537)] == [
        np.uint8, np.uint8, np.uint16, np.uint16, np.uint32]


def test_an_id_outside_the_vocabulary_is_refused(tmp_path):
    """Byte tokens (ids 5 to 260) stored for a vocabulary said to be 50 ids: refused, not wrapped around."""
    tok = training_recipes.tokenizer(Recipe(suite="t", kind="char-mlm", **TINY))
    with pytest.raises(ValueError, match="outside a vocabulary of 50"):
        tokens.write(tmp_path, [["abc"]], tok.backend_tokenizer, 50, joiner=3)


# ---- memory: flat in the corpus's size --------------------------------------------------------------------------

# A child process prepares the token array of a synthetic corpus of ``mb`` MB of text and prints its tokens and peak
# resident memory (VmHWM, kB). The corpus is generated a batch at a time: paragraphs of 81 pseudo-words (2-9 letters)
# from a fixed seed, ~475 characters each. Its tokenizer is a word-level ``tokenizers.Tokenizer`` over those 4,096
# words (0.15 tokens a character): tokenizing is the time of this test, and a byte-level one (1 token a character)
# would take ~5x longer. The child imports only numpy, tokenizers and the module under test.
_PREPARE = textwrap.dedent("""
    import re, sys
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers
    from anisotropy.training import tokens

    mb, folder = int(sys.argv[1]), sys.argv[2]
    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    words = sorted({bytes(rng.choice(letters, size=n)).decode() for n in rng.integers(2, 10, size=4096)})
    vocab = {w: i for i, w in enumerate(["[UNK]", "[SEP]", *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()

    pool = [" ".join(words[i] for i in row) for row in rng.integers(0, len(words), size=(1024, 80))]

    def batches():  # 2,000 paragraphs a batch (~0.95 MB), each a new string: a pooled one and a word
        produced = 0
        while produced < mb * 10**6:
            batch = [pool[i] + " " + words[j] for i, j in rng.integers(0, [len(pool), len(words)], size=(2000, 2))]
            produced += sum(map(len, batch))
            yield batch

    array = tokens.token_array("synthetic", batches, tok, len(vocab), vocab["[SEP]"], root=folder)
    status = open("/proc/self/status").read()
    print(len(array.ids), int(array.ids[-1]), int(re.search(r"^VmHWM:\\s+(\\d+) kB", status, flags=re.M).group(1)))
""")


def _prepare(mb: int, folder) -> tuple[int, int]:
    """(tokens, peak resident kB) of a fresh process preparing ``mb`` MB of synthetic text."""
    proc = run_guarded([sys.executable, "-c", _PREPARE, str(mb), str(folder)], expected_s=60, capture_output=True,
                       text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    n, last, peak_kb = map(int, proc.stdout.split())
    assert last == 1  # the stream ends with the joiner, [SEP]
    return n, peak_kb


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc")
def test_preparation_memory_does_not_grow_with_the_corpus(tmp_path):
    """Peak resident memory of preparing 50 and 200 MB of text (4x apart; 3.05e7 tokens in the larger) differs by
    less than 32 MiB. The bound: a preparation holds one chunk at a time, CHUNK_CHARS = 1 Mi characters (plus the
    paragraph that closes it, < 1 kB), so its peak is one chunk's, the same in both runs: its text (1 MB), the
    tokenizer's encodings of its ~0.16 Mi tokens (~200 bytes each: 32 MB) and their ids (~60 bytes each: a Python
    int list, three int64 arrays, a mask, the uint16 stored; 10 MB), ~45 MB in all; what differs is allocator noise
    (measured: 1.5 MB here, peaks of ~88 MB with the imports; 9 MB with a byte-level tokenizer at 52 and 208 MiB). A
    preparation that held more than a chunk would exceed the bound: the larger corpus's extra 150 MB of text, or its
    extra 2.3e7 tokens as int64 (180 MB), or even as uint16 (46 MB)."""
    small_n, small_kb = _prepare(50, tmp_path / "small")
    large_n, large_kb = _prepare(200, tmp_path / "large")
    assert large_n > 3.9 * small_n  # 4x the text, 4x the tokens
    assert abs(large_kb - small_kb) < 32 * 1024, (small_kb, large_kb)


# ---- two workers, one array ----------------------------------------------------------------------------------------

def _worker(barrier, root: str, results) -> None:
    """Prepare the array "shared" after every worker has reached the barrier; report whether this process wrote it
    (its batches were read) and the array's inode and checksum."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(["[SEP]", *alphabet])}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    wrote = []

    def batches():
        wrote.append(True)
        rng = np.random.default_rng(1)
        for _ in range(20):  # ~8 MB: long enough for the two to overlap
            yield ["".join(map(chr, rng.integers(97, 123, size=400))) for _ in range(1000)]

    barrier.wait()
    array = tokens.token_array("shared", batches, tok, len(alphabet) + 1, joiner=0, root=root)
    results.put((bool(wrote), os.stat(array.folder / "tokens.bin").st_ino, int(array.ids.astype(np.int64).sum()),
                 len(array.ids)))


def test_two_workers_preparing_one_corpus_make_one_array(tmp_path):
    """Two processes asking for the same array at the same moment: one tokenizes, the other waits on the lock and
    reads the first one's file; no temporary folder is left behind."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(barrier, str(tmp_path), results)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in procs]  # a hang guard, not a time limit
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert sorted(w for w, *_ in got) == [False, True], "exactly one process tokenized"
    assert got[0][1:] == got[1][1:], "both read the same file, with the same ids"
    assert got[0][3] == 20 * 1000 * 401
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shared.lock", "shared"]
