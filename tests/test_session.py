"""The model session (``models.session``): load, measure, free; a GPU out of memory, loading or measuring, is one line
and the memory comes back, measured; every experiment that loads a model to measure it goes through it; a layer where
no vector is kept is told by its type (``taps.NoVectorKept``), not by its words."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import weakref
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from anisotropy import results
from anisotropy.errors import ModelTooLargeError
from anisotropy.experiments import block, layerwise, model_profile, qk_dynamics, spectral
from anisotropy.measure import taps
from anisotropy.models import registry
from anisotropy.models.session import session

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["The cat sat on the mat.", "A second sentence, a little longer than the first one."]
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"
# registry.out_of_memory's line for BERT-base: 109.5M parameters x 4 bytes = 0.41 GiB in float32, 0.20 in float16
BERT_OOM = ("bert-base-uncased ran out of GPU memory: its weights alone take {gib} GiB in {dtype}; use dtype float16 "
            "(or bfloat16), a smaller batch_size{now}, or a smaller model")


def full_gpu(*args, **kwargs):
    raise torch.cuda.OutOfMemoryError(OOM)


# ---- memory, measured -------------------------------------------------------------------------------------------------

_SESSIONS = """
import json, weakref
import torch
from anisotropy.errors import ModelTooLargeError
from anisotropy.measure import taps
from anisotropy.models.session import session

def rss():  # bytes this process holds in memory now
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) * 1024

def full_gpu(*args):  # a forward hook: the pass runs out of GPU memory half-way through the model
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

torch.set_num_threads(1)
texts = %r
with session("bert-base-uncased", variant="tiny") as tiny:  # imports, tokenizer and kernels warmed up
    taps.extract(tiny, texts, batch_size=2)
out = {}
for path in ("measured", "out of memory"):
    before, error = rss(), None
    try:
        with session("bert-base-uncased", variant="untrained", batch_size=2) as loaded:
            model = weakref.ref(loaded.model)
            size = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
            grown = rss() - before
            if path == "out of memory":
                loaded.model.encoder.layer[6].register_forward_hook(full_gpu)
            taps.extract(loaded, texts, batch_size=2)
        after, alive = rss() - before, model() is not None
    except ModelTooLargeError as exc:  # measured while the caller still holds the error, as a notebook does
        error, after, alive = str(exc), rss() - before, model() is not None
    out[path] = {"size": size, "grown": grown, "after": after, "alive": alive, "error": error,
                 "emptied": loaded.model is None}
print(json.dumps(out))
""" % (TEXTS,)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's resident memory of the process")
def test_a_real_size_model_is_freed_after_running_out_of_memory_and_after_a_normal_measurement():
    """BERT-base with random weights (418 MiB of float32) on the CPU, measured once normally and once with its
    seventh layer raising ``torch.cuda.OutOfMemoryError`` mid-pass: after each session the model is gone (a weak
    reference to it is dead) and the process's resident memory is back to what it was before the load, even while
    the out-of-memory line is still held (its context keeps the original error, whose frames held the model)."""
    # glibc's default allocator raises its mmap threshold as blocks are freed, after which the freed weights stay in
    # its heap (reused, but resident); a fixed threshold (its initial 128 KiB) hands every block above it back, so
    # the resident memory follows what is alive. Not the book's kernels' setting (executor.MALLOC_DEFAULTS keeps
    # freed memory on purpose); what is alive is the same under both.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(MALLOC_MMAP_THRESHOLD_="131072", PYTHONPATH=str(ROOT / "lib"))
    done = subprocess.run([sys.executable, "-c", _SESSIONS], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for path, seen in out.items():
        assert seen["size"] == out["measured"]["size"] > 400 * 2**20  # BERT-base's weights in float32
        assert seen["grown"] > 0.95 * seen["size"], path  # the measurement sees the model arrive ...
        # ... and leave: what stays is the interpreter's and the allocator's small change (a few MiB here), far
        # below one of the model's 12 encoder layers (7.1M parameters, 27 MiB) had one been kept alive.
        assert seen["after"] < 24 * 2**20, (path, seen)
        assert not seen["alive"] and seen["emptied"], path
    assert out["measured"]["error"] is None
    assert out["out of memory"]["error"] == BERT_OOM.format(gib="0.4", dtype="torch.float32", now=" (now 2)")


# ---- the line, and freeing, in process ----------------------------------------------------------------------------------


def test_out_of_memory_while_loading_is_the_line_without_a_batch_and_leaves_nothing_behind(monkeypatch):
    built, real = [], registry.load

    def load(name, **options):  # as registry.load's move to the GPU fails: the model is built, then memory runs out
        model = real(name, variant="tiny").model
        built.append(weakref.ref(model))
        full_gpu()

    monkeypatch.setattr(registry, "load", load)
    with pytest.raises(ModelTooLargeError) as err:
        with session("bert-base-uncased", variant="pretrained", device="cuda", batch_size=4):
            raise AssertionError("the block must not run when the model could not be loaded")
    assert str(err.value) == BERT_OOM.format(gib="0.4", dtype="torch.float32", now="")
    assert isinstance(err.value.__context__, torch.cuda.OutOfMemoryError)  # what the GPU said, kept as context
    assert built[0]() is None  # freed while the error is still held


def test_out_of_memory_while_measuring_names_the_dtype_and_batch_and_frees_the_model():
    with pytest.raises(ModelTooLargeError) as err:
        with session("bert-base-uncased", variant="tiny", dtype=torch.float16, batch_size=4) as loaded:
            model = weakref.ref(loaded.model)
            loaded.model.encoder.layer[1].register_forward_hook(full_gpu)
            taps.extract(loaded, TEXTS, batch_size=4)
    assert str(err.value) == BERT_OOM.format(gib="0.2", dtype="torch.float16", now=" (now 4)")
    assert model() is None and loaded.model is None and loaded.preprocessor is None
    assert loaded.spec.name == "bert-base-uncased"  # what the model was stays readable


def test_other_errors_pass_unchanged_and_the_model_is_freed_all_the_same():
    problem = KeyError("a problem of the caller's")
    with pytest.raises(KeyError) as err:
        with session("gpt2", variant="tiny") as loaded:
            model = weakref.ref(loaded.model)
            raise problem
    assert err.value is problem
    assert model() is None and loaded.model is None
    with session("gpt2", variant="tiny") as loaded:
        model = weakref.ref(loaded.model)
        rows = taps.layer_frame(taps.extract(loaded, TEXTS))
    assert model() is None and len(rows) == 3  # embeddings and two blocks, measured before the model left


def test_a_loader_of_ones_own_or_registry_options_not_both():
    with pytest.raises(TypeError, match="either a loader or registry.load's options"):
        with session("gpt2", variant="tiny", load=lambda: registry.load("gpt2", variant="tiny")):
            pass
    with session("gpt2", dtype=torch.float32, load=lambda: registry.load("gpt2", variant="tiny")) as loaded:
        assert loaded.variant == "tiny"


# ---- every experiment that measures a model goes through it --------------------------------------------------------


def _qk(store):
    stage = qk_dynamics.Stage("tiny BERT", 0, 0, "bert-base-uncased", variant="tiny")
    frame = qk_dynamics.step_statistics([stage, replace(stage, step=1)], n_samples=2, max_length=16, batch_size=4,
                                        store=store, progress=False)
    return frame


SITES = {
    "layerwise": (lambda store: layerwise.measure(layerwise.ModelRef("bert-base-uncased", "tiny"), lambda: TEXTS,
                                                  source="prose", n=2, batch_size=4, store=store),
                  (taps, "extract"), ModelTooLargeError, "bert-base-uncased ran out of GPU memory"),
    "spectral": (lambda store: spectral.profile("bert-base-uncased", "tiny", n_texts=4, batch_size=8, n_batches=1,
                                                extraction_batch=4, store=store),
                 (taps, "extract"), ModelTooLargeError, "bert-base-uncased ran out of GPU memory"),
    "block": (lambda store: block.reference_norms(["bert-base-uncased"], n_texts=4, max_length=16, variant="tiny",
                                                  batch_size=4),
              (taps, "extract"), ModelTooLargeError, "bert-base-uncased ran out of GPU memory"),
    "model_profile": (lambda store: model_profile.profile("bert-base-uncased", n=4, variant="tiny",
                                                          extraction_batch=4, store=store),
                      (taps, "text_vectors"), model_profile.ProfileInputError,
                      "bert-base-uncased: bert-base-uncased ran out of GPU memory"),
    # a checkpoint that runs out of memory is left out of its run, named (qk_dynamics.SKIPPABLE), like one that
    # could not be downloaded; with every checkpoint out, the run stops on the first one's line
    "qk_dynamics": (_qk, (qk_dynamics, "head_statistics"), Exception,
                    "none of the 2 checkpoints .*bert-base-uncased ran out of GPU memory"),
}


@pytest.mark.parametrize("site", SITES)
def test_each_experiment_words_out_of_memory_through_the_session(site, monkeypatch, tmp_path):
    run, (owner, name), kind, line = SITES[site]
    loaded = []
    real = registry.load

    def load(*args, **kwargs):
        loaded.append(real(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(registry, "load", load)
    monkeypatch.setattr(owner, name, full_gpu)
    with pytest.raises(kind, match=line) as err:
        run(results.Store(tmp_path / "r"))
    assert "(now 4)" in str(err.value)  # the batch the experiment measured with
    assert loaded and all(one.model is None for one in loaded)  # each session emptied what it loaded
    assert not list((tmp_path / "r").rglob("*.parquet"))  # nothing stored


# ---- a layer where no vector is kept: told by its type ------------------------------------------------------------------


def test_a_model_whose_layer_keeps_no_vector_is_stored_as_a_skip(monkeypatch, tmp_path):
    """Weights whose last block outputs exactly zero (its LayerNorm's gain and bias at 0, as an untrained CNN's
    activations that underflow): taps keeps no vector of that layer, and the chapter stores the skip, not the rows."""
    real = registry.load

    def dead_last_block(name, **options):
        loaded = real(name, **options)
        norm = loaded.model.encoder.layer[-1].output.LayerNorm
        torch.nn.init.zeros_(norm.weight), torch.nn.init.zeros_(norm.bias)
        return loaded

    monkeypatch.setattr(registry, "load", dead_last_block)
    store = results.Store(tmp_path / "r")
    ref = layerwise.ModelRef("bert-base-uncased", "tiny")  # embeddings and two blocks: layers 0, 1 and 2
    kwargs = dict(source="prose", n=2, max_length=16, store=store)
    with pytest.raises(layerwise.UnmeasurableError,
                       match=r"^bert-base-uncased: no vector was kept in layers \[2\] of 2 examples"):
        layerwise.measure(ref, lambda: TEXTS, **kwargs)
    monkeypatch.setattr(registry, "load", lambda *a, **k: pytest.fail("the stored skip should have been read"))
    with pytest.raises(layerwise.UnmeasurableError, match=r"no vector was kept in layers \[2\]"):
        layerwise.measure(ref, lambda: TEXTS, **kwargs)


def test_the_skip_follows_the_type_of_the_error_not_its_words(monkeypatch, tmp_path):
    store = results.Store(tmp_path / "r")
    ref = layerwise.ModelRef("bert-base-uncased", "tiny")
    kwargs = dict(source="prose", n=2, max_length=16, store=store)
    monkeypatch.setattr(taps, "extract", lambda *a, **k: (_ for _ in ()).throw(taps.NoVectorKept("in other words")))
    with pytest.raises(layerwise.UnmeasurableError, match="^in other words$"):
        layerwise.measure(ref, lambda: TEXTS, **kwargs)
    assert isinstance(taps.NoVectorKept("x"), ValueError)  # callers that catch ValueError still catch it
    # the words alone, on another error, are not a skip: the library's own error stops the chapter
    words = ValueError("bert-base-uncased: no vector was kept in layers [1] of 2 examples")
    monkeypatch.setattr(taps, "extract", lambda *a, **k: (_ for _ in ()).throw(words))
    with pytest.raises(ValueError) as err:
        layerwise.measure(ref, lambda: TEXTS, **{**kwargs, "n": 3})
    assert err.value is words
    stored = [pd.read_parquet(p) for p in (tmp_path / "r").rglob("*.parquet")]
    assert [list(f[layerwise.SKIPPED_COLUMN]) for f in stored] == [["in other words"]]


def test_a_remote_code_model_out_of_memory_is_the_sessions_line_its_other_failures_a_skip(monkeypatch, tmp_path):
    """Inside a remote-code model's pass, an exception is a one-line skip (``layerwise.remote_failure``), except
    running out of GPU memory, which the session words like any model's."""
    real = registry.load

    def remote(name, **options):  # a tiny BERT standing for a model whose code comes from its Hub repository
        loaded = real(name, **options)
        loaded.spec = replace(loaded.spec, remote_code=True)
        return loaded

    monkeypatch.setattr(registry, "load", remote)
    ref = layerwise.ModelRef("bert-base-uncased", "tiny")
    kwargs = dict(source="prose", n=2, max_length=16, batch_size=4, store=results.Store(tmp_path / "r"))
    monkeypatch.setattr(taps, "extract", full_gpu)
    with pytest.raises(ModelTooLargeError, match=r"^bert-base-uncased ran out of GPU memory: .*\(now 4\)"):
        layerwise.measure(ref, lambda: TEXTS, **kwargs)
    monkeypatch.setattr(taps, "extract", lambda *a, **k: (_ for _ in ()).throw(IndexError("its own bug")))
    hub_id = registry.spec("bert-base-uncased").hub_id
    with pytest.raises(layerwise.UnmeasurableError, match=re.escape(
            f"bert-base-uncased: measuring it through its remote code ({hub_id}) failed: IndexError: its own bug")):
        layerwise.measure(ref, lambda: TEXTS, **kwargs)
