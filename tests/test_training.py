"""The checkpoint-suite trainer: learning, bit-identical reloads, exact resumption, seeds, tokenizers, baselines."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import hang_guard

from anisotropy.data import prose
from anisotropy.training import trainer, checkpoints, recipes as training_recipes, tasks
from anisotropy.training.recipes import Recipe

TINY = dict(width=32, depth=2, heads=2, seq_len=32, vocab_size=320, batch_size=8, warmup=4, lr=3e-3,
            n_checkpoints=5, eval_every=0, eval_size=16, image_size=16, patch_size=4)


def tiny(kind: str, steps: int = 12, **overrides) -> Recipe:
    return Recipe(suite=f"tiny-{kind}", kind=kind, steps=steps, **{**TINY, **overrides})


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    """Tokenizers go to the cache folder: keep the tests' out of the project's."""
    before = os.environ.get("ANISOTROPY_CACHE")
    os.environ["ANISOTROPY_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("ANISOTROPY_CACHE")
    else:
        os.environ["ANISOTROPY_CACHE"] = before


def run(recipe: Recipe, out_dir, **kwargs):
    """Train quietly on one thread (tiny models run fastest so, and the tests share the machine)."""
    return trainer.train(recipe, out_dir=out_dir, progress=False, threads=1, **kwargs)


def weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_checkpoint_steps_are_log_spaced_from_zero():
    r = Recipe(suite="s", kind="mlm", steps=1000, n_checkpoints=10)
    steps = r.checkpoint_steps
    assert steps[0] == 0 and steps[-1] == 1000 and len(steps) == 10
    ideal = 1000 ** (np.arange(9) / 8)  # geometric from 1 to 1000
    assert np.all(np.abs(np.array(steps[1:]) - ideal) <= 0.5)  # up to rounding to whole updates
    assert set(steps) <= set(r.eval_steps)


def test_learning_rate_schedule_endpoints():
    r = Recipe(suite="s", kind="mlm", steps=100, warmup=10, lr=1e-3, min_lr_ratio=0.1)
    assert r.lr_at(5) == pytest.approx(5e-4)
    assert r.lr_at(10) == pytest.approx(1e-3)
    assert r.lr_at(55) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))  # cosine half-way
    assert r.lr_at(100) == pytest.approx(1e-4)


def test_recipe_hash_ignores_seed_and_name_but_not_hyperparameters():
    r = tiny("mlm")
    assert r.hash == replace(r, seed=5, suite="other").hash
    assert r.hash != replace(r, lr=1e-4).hash
    assert r.hash != replace(r, kind="char-mlm").hash
    assert r.hash != replace(r, threads=2).hash  # the thread count changes the weights' last bits
    with pytest.raises(ValueError, match="attention_variant"):
        replace(r, attention_variant="no-such-variant")


def test_precision_is_float16_on_cuda_float32_elsewhere_and_part_of_the_hash():
    """"auto" resolves when the recipe is made, so the recipe (and its training record) names the precision it
    trains in; a float16 suite never shares a folder or a results key with a float32 one."""
    r = tiny("mlm")
    assert r.precision == "float32" and replace(r, precision="auto").precision == "float32"
    on_gpu = tiny("mlm", device="cuda")
    assert on_gpu.precision == "float16" and tiny("mlm", device="cuda", precision="float32").precision == "float32"
    assert len({r.hash, replace(r, precision="float16").hash, replace(r, precision="bfloat16").hash}) == 3
    assert replace(r, precision="auto") == r and replace(r, precision="auto").hash == r.hash
    with pytest.raises(ValueError, match="precision"):
        tiny("mlm", precision="float8")


def test_suite_specs_expand_to_one_recipe_per_seed():
    got = training_recipes.recipes("mlm", {"kind": "mlm", "seeds": [0, 1, 2], "width": 64, "lr": 0.001})
    assert [r.seed for r in got] == [0, 1, 2] and {r.width for r in got} == {64}
    with pytest.raises(ValueError, match="unknown"):
        training_recipes.recipes("mlm", {"kind": "mlm", "widht": 64})


def test_wordpiece_tokenizer_is_deterministic_and_loads_from_a_checkpoint(tmp_path):
    from transformers import AutoTokenizer

    r = tiny("mlm")
    a = training_recipes._build_tokenizer("mlm", 320, 32)
    b = training_recipes._build_tokenizer("mlm", 320, 32)
    assert a.get_vocab() == b.get_vocab() and len(a) == 320
    ckpt = run(replace(r, steps=1), out_dir=tmp_path)[0]
    loaded = AutoTokenizer.from_pretrained(ckpt.path)
    enc = loaded("The object is an instance.")
    assert loaded.convert_ids_to_tokens(enc["input_ids"])[0] == "[CLS]"
    assert loaded.convert_ids_to_tokens(enc["input_ids"])[-1] == "[SEP]"
    assert loaded.mask_token == "[MASK]" and loaded.model_max_length == 32


def test_byte_and_bpe_tokenizers_round_trip(tmp_path):
    from transformers import AutoTokenizer

    text = "Naïve __init__ calls, Spaces  and CASE."
    byte_tok = training_recipes.tokenizer(tiny("char-mlm"))
    ids = byte_tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text.encode("utf-8"))  # one token per byte
    assert byte_tok.decode(ids) == text
    ckpt = run(tiny("clm", steps=1), out_dir=tmp_path)[0]
    bpe = AutoTokenizer.from_pretrained(ckpt.path)
    enc = bpe(text)
    assert "token_type_ids" not in enc  # GPT-2 would add wte(type id) to every position
    assert bpe.decode(enc["input_ids"]) == text


@pytest.mark.parametrize("kind", ["mlm", "clm", "char-mlm"])
def test_language_model_loss_decreases_from_chance(kind, tmp_path):
    r = tiny(kind, steps=40, eval_every=10)
    ckpts = run(r, out_dir=tmp_path)
    assert [c.step for c in ckpts] == list(r.checkpoint_steps)
    state = checkpoints.training_state(ckpts[-1])
    val = [v["loss"] for v in state["validation"]]
    # a freshly initialised model predicts nearly uniformly: its loss is the chance level log(vocabulary)
    assert val[0] == pytest.approx(state["baselines"]["chance"], abs=0.15)
    assert val[-1] < val[0] - 0.5
    train_loss = state["train_loss"]
    assert len(train_loss) == 40 and np.mean(train_loss[-5:]) < np.mean(train_loss[:5]) - 0.5


@pytest.mark.parametrize("kind", ["vit", "cnn"])
def test_vision_models_start_at_chance(kind, tmp_path):
    # the shapes need a few hundred updates of 64 images to be learnt (the chapter shows it); here: the run is sane
    r = tiny(kind, steps=6, eval_size=64)
    state = checkpoints.training_state(run(r, out_dir=tmp_path)[-1])
    assert state["baselines"]["chance"] == pytest.approx(math.log(6))
    for v in state["validation"]:
        assert v["loss"] == pytest.approx(math.log(6), abs=0.3) and 0 <= v["accuracy"] <= 1


def test_validation_paragraphs_are_disjoint_from_training():
    train, held = training_recipes.split_paragraphs()
    assert held and not set(train) & set(held)  # the corpus repeats paragraphs across topics: none may leak
    assert len(train) + len(held) == len(set(prose.prose_paragraphs()))


def test_unigram_baseline_matches_a_direct_count(tmp_path):
    r = tiny("clm")
    task = tasks._TextTask(r)
    counts = np.bincount(task.stream, minlength=task.vocab_size) + 0.5
    targets = task.validation["labels"][:, 1:].numpy().ravel()
    direct = -np.mean([math.log(counts[t] / counts.sum()) for t in targets])
    assert task.baselines["unigram"] == pytest.approx(direct, rel=1e-12)
    assert task.baselines["unigram"] < task.baselines["chance"]


@pytest.mark.parametrize("kind, overrides", [("mlm", {}), ("mlm", {"positions": "relative_key", "mask_prob": 0.4}),
                                             ("vit", {})])
def test_saved_checkpoint_reloads_bit_identically(kind, overrides, tmp_path):
    from transformers import AutoModel

    r = tiny(kind, steps=3, **overrides)
    ckpts = run(r, out_dir=tmp_path)
    initial = training_recipes.build_model(r)
    reloaded = training_recipes.load_model(r, ckpts[0].path)
    assert_same_weights(initial.state_dict(), reloaded.state_dict())
    # the reloaded final model reproduces the validation loss recorded during training
    task = tasks.task_for(r)
    final = training_recipes.load_model(r, ckpts[-1].path).eval()
    with torch.no_grad():
        assert task.evaluate(final, "cpu")["loss"] == pytest.approx(ckpts[-1].loss, rel=1e-6)
    assert AutoModel.from_pretrained(ckpts[-1].path) is not None  # what registry.load does


def test_relative_positions_enter_the_scores_as_shaw_et_al():
    """A ``relative_key`` encoder's attention is softmax((q.k_j + q.r_{i-j}) / sqrt(d)), with r the learnt vector of
    the distance: recomputed here by hand from the captured queries and keys and the distance table."""
    from anisotropy.measure import attention

    r = tiny("mlm", positions="relative_key")
    model = training_recipes.build_model(r).eval()
    assert model.config.position_embedding_type == "relative_key" and model.config._attn_implementation == "eager"
    with torch.no_grad():  # no absolute positions added: one token embeds the same at every position
        same = model.bert.embeddings(input_ids=torch.full((1, 20), 7))
    torch.testing.assert_close(same[0, 1:], same[0, :1].expand(19, -1), rtol=0, atol=0)
    ids = torch.randint(5, 300, (2, 20), generator=torch.Generator().manual_seed(0))
    caps = attention.capture(model, {"input_ids": ids})
    for layer, cap in caps.items():
        table = model.bert.encoder.layer[layer].attention.self.distance_embedding.weight
        distance = torch.arange(20)[:, None] - torch.arange(20)[None, :] + r.seq_len - 1
        positional = torch.einsum("bhid,ijd->bhij", cap.queries, table[distance])
        expected = torch.softmax((cap.queries @ cap.keys.transpose(-1, -2) + positional) * cap.scale, dim=-1)
        torch.testing.assert_close(cap.probs, expected, rtol=1e-5, atol=1e-6)
        # and the positional term is not zero: the same keys at other distances get other weights
        assert (positional.std() / (cap.queries @ cap.keys.transpose(-1, -2)).std()) > 0.1


def test_relative_positions_are_for_the_bert_kinds_only():
    with pytest.raises(ValueError, match="positions"):
        tiny("clm", positions="relative_key")
    with pytest.raises(ValueError, match="positions"):
        tiny("mlm", positions="rotary")
    assert tiny("mlm").hash != tiny("mlm", positions="relative_key").hash


@pytest.mark.parametrize("stop_after, precision", [(5, "float32"), (7, "float32"), (7, "float16")])
def test_resume_after_interruption_matches_an_uninterrupted_run(stop_after, precision, tmp_path):
    """5 is a checkpoint step, 7 falls between checkpoints; in float16 the gradient scaler's state (its scale and
    the updates since its last overflow) is resumed too."""
    r = tiny("mlm", steps=12, precision=precision)  # checkpoints at 0, 1, 2, 5, 12
    straight = run(r, out_dir=tmp_path / "straight")
    partial = run(r, out_dir=tmp_path / "resumed", stop_after=stop_after)
    assert partial[-1].step <= stop_after and not checkpoints.is_trained(r, tmp_path / "resumed")
    resumed = run(r, out_dir=tmp_path / "resumed")
    assert [c.step for c in resumed] == [c.step for c in straight]
    assert_same_weights(weights(straight[-1].path), weights(resumed[-1].path))
    a, b = (checkpoints.training_state(c[-1]) for c in (straight, resumed))
    assert a["train_loss"] == b["train_loss"] and a["validation"] == b["validation"]
    # finished runs keep one optimiser state (the last checkpoint's) and no snapshots
    folder = checkpoints.run_dir(r, tmp_path / "resumed")
    assert [p.parent.name for p in folder.glob("*/optimizer.pt")] == ["step-12"]
    assert not list(folder.glob("resume-*"))
    scalers = [torch.load(c[-1].path / "grad_scaler.pt") if precision == "float16" else None for c in (straight, resumed)]
    assert scalers[0] == scalers[1] and (precision != "float16" or scalers[0]["_growth_tracker"] == 12)
    assert [p.parent.name for p in folder.glob("*/grad_scaler.pt")] == (["step-12"] if precision == "float16" else [])


# Unit roundoff (2^-p for p significant bits): bfloat16 keeps 8, float16 11.
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11}


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind", ["mlm", "clm"])
def test_mixed_precision_follows_the_float32_loss_curve(kind, precision, tmp_path):
    """The first 20 training losses of a tiny recipe under CPU autocast (bfloat16; float16 with the gradient scaler)
    against float32, from the same initialisation and batches. Tolerance: each loss within one unit roundoff u of
    the autocast dtype, relative (bfloat16 3.9e-3, float16 4.9e-4). One rounding of the loss itself is already u/2;
    the matrix products round every element to u, but the loss averages those errors over every predicted token
    (~40 masked, ~250 next-token targets a batch) and 20 updates of lr <= 3e-3 move the weights apart by ~lr x u
    each, so a correct mixed-precision path stays well inside u (measured: < 6e-5 in bfloat16, < 7e-6 in float16).
    The curves must also differ by more than float32's own roundoff, 2^-24: autocast was in effect."""
    base = tiny(kind, steps=20)
    curves = {}
    for p in ("float32", precision):
        found = run(replace(base, precision=p), out_dir=tmp_path / p)
        state = checkpoints.training_state(found[-1])
        assert state["recipe"]["precision"] == p
        curves[p] = np.array(state["train_loss"])
    rel = np.abs(curves[precision] - curves["float32"]) / curves["float32"]
    assert len(rel) == 20 and rel.max() < UNIT_ROUNDOFF[precision], rel
    assert rel.max() > 2.0**-24


def test_parallel_runs_end_bit_identical_to_serial_runs(tmp_path):
    """train_many trains in worker processes (executor.map, two at once) what train trains here one after another:
    every checkpoint of every run has the same weights and the same loss records, and a run interrupted before the
    parallel batch resumes in its worker to the same end."""
    recipes = [tiny("mlm", steps=6, positions="relative_key", mask_prob=0.4), tiny("mlm", steps=6, seed=1),
               tiny("clm", steps=6), tiny("vit", steps=6)]
    serial = {r: run(r, out_dir=tmp_path / "serial") for r in recipes}
    run(recipes[1], out_dir=tmp_path / "parallel", stop_after=3)  # interrupted: resumed by its worker
    parallel = trainer.train_many(recipes, out_dir=tmp_path / "parallel", workers=2, progress=False)
    for r in recipes:
        assert [c.step for c in parallel[r]] == [c.step for c in serial[r]] == list(r.checkpoint_steps)
        for a, b in zip(serial[r], parallel[r]):
            assert_same_weights(weights(a.path), weights(b.path))
        sa, sb = (checkpoints.training_state(c[-1]) for c in (serial[r], parallel[r]))
        assert sa["train_loss"] == sb["train_loss"] and sa["validation"] == sb["validation"]
        assert sb["threads"] == r.threads == 1
    # trained runs are reused, not trained again
    stamp = (parallel[recipes[0]][-1].path / "model.safetensors").stat().st_mtime_ns
    again = trainer.train_many(recipes, out_dir=tmp_path / "parallel", workers=2, progress=False)
    assert (again[recipes[0]][-1].path / "model.safetensors").stat().st_mtime_ns == stamp


def test_runs_are_scheduled_costliest_first():
    small, wide, long = tiny("mlm", steps=6), tiny("mlm", steps=6, width=64), tiny("mlm", steps=60)
    assert trainer.cost(wide) > trainer.cost(small) and trainer.cost(long) == 10 * trainer.cost(small)
    assert trainer.cost(tiny("vit", steps=6)) > 0 and trainer.cost(tiny("cnn", steps=6)) > 0


def test_two_seeds_differ_and_one_seed_repeats(tmp_path):
    r0, r1 = tiny("vit", steps=4), tiny("vit", steps=4, seed=1)
    a = run(r0, out_dir=tmp_path / "a")
    b = run(r0, out_dir=tmp_path / "b")
    c = run(r1, out_dir=tmp_path / "a")
    assert_same_weights(weights(a[-1].path), weights(b[-1].path))
    wa, wc = weights(a[-1].path), weights(c[-1].path)
    assert all(not torch.equal(wa[k], wc[k]) for k in wa if wa[k].ndim == 2)
    assert a[-1].path.parent.name == "seed-0" and c[-1].path.parent.name == "seed-1"


def test_trained_suite_is_reused_not_retrained(tmp_path):
    r = tiny("cnn", steps=3)
    first = run(r, out_dir=tmp_path)
    stamp = (first[-1].path / "model.safetensors").stat().st_mtime_ns
    again = run(r, out_dir=tmp_path)
    assert again == first and (again[-1].path / "model.safetensors").stat().st_mtime_ns == stamp
    assert checkpoints.checkpoints(replace(r, lr=1e-2), out_dir=tmp_path) == []  # a new recipe starts empty


HOLDER = """
import json, shutil, sys
from anisotropy.training import checkpoints
from anisotropy.training.recipes import Recipe

recipe, source, shared = Recipe(**json.loads(sys.argv[1])), sys.argv[2], sys.argv[3]
lock = checkpoints.run_lock(recipe, shared)
lock.acquire()
print("held", flush=True)
sys.stdin.readline()  # the other process waits for the run by now
shutil.copytree(checkpoints.run_dir(recipe, source), checkpoints.run_dir(recipe, shared))  # the run, trained
lock.release()
"""
ASKER = """
import json, sys
from anisotropy.training import trainer
from anisotropy.training.recipes import Recipe

def refuse(recipe):
    raise AssertionError("trained a run that another process was training")

trainer.task_for = refuse  # training starts by making the run's task: this process may not train
found = trainer.train(Recipe(**json.loads(sys.argv[1])), out_dir=sys.argv[2], progress=False)
print(json.dumps([str(c.path) for c in found]))
"""


def test_a_run_another_process_is_training_is_waited_for_and_not_trained_again(tmp_path):
    # The book build trains each run of the suites in a process of its own; a chapter that needs a run such a process
    # is training waits for it (the run's lock) and reads it. One process holds the run's lock, then puts the trained
    # run in place (trained here first) and lets the lock go; the other asks for the run meanwhile: it says it waits,
    # then returns the holder's checkpoints, and never makes the run's task (it would fail if it did).
    import json
    import subprocess
    import sys
    from dataclasses import asdict

    from anisotropy import progress

    r = tiny("cnn", steps=3)
    trained = run(r, out_dir=tmp_path / "trained")  # alone, a run is trained where it is asked for
    shared = tmp_path / "shared"
    spec = json.dumps(asdict(r))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "lib"),
                                                         os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, spec, str(tmp_path / "trained"), str(shared)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    asker = None
    try:
        assert holder.stdout.readline().strip() == "held"
        asker = subprocess.Popen([sys.executable, "-c", ASKER, spec, str(shared)], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        said = ""
        while not said.startswith(progress.MARK + "waiting for tiny-cnn seed 0"):
            said = asker.stderr.readline()
            assert said, "the asking process ended without waiting"
        holder.stdin.write("\n")
        holder.stdin.flush()
        out, err = asker.communicate(timeout=hang_guard(60))
        assert holder.wait(timeout=hang_guard(60)) == 0
    finally:
        for proc in (holder, asker):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert asker.returncode == 0, err
    found = [Path(p) for p in json.loads(out)]
    assert [p.relative_to(shared) for p in found] == [c.path.relative_to(tmp_path / "trained") for c in trained]
    assert_same_weights(weights(found[-1]), weights(trained[-1].path))


def test_chapter_defaults_are_the_local_profile():
    """The chapter's parameters cell shows the local recipes; the profile is what every chapter trains from."""
    from anisotropy import profiles

    assert profiles.notebook_parameters("checkpoint_suites")["suites"] == training_recipes.suite_specs("local")
    for profile in profiles.names():
        for name in training_recipes.suite_specs(profile):
            assert training_recipes.suite(name, profile)  # every spec builds valid recipes


@pytest.mark.parametrize("bias", [False, True])
def test_fused_output_layer_loss_equals_cross_entropy_of_the_logits(bias):
    """linear_cross_entropy (blocks of rows, logits recomputed backwards) against F.cross_entropy of the full logits,
    in float64: the loss and every gradient to rounding, with a block size that does not divide the rows."""
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(1000, 48, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(300, 48, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(300, dtype=torch.float64, generator=gen, requires_grad=True) if bias else None
    y = torch.randint(0, 300, (1000,), generator=gen)
    params = [h, w] + ([b] if bias else [])
    reference = torch.nn.functional.cross_entropy(h @ w.T + (b if bias else 0), y)
    expected = torch.autograd.grad(reference, params)
    fused = tasks.linear_cross_entropy(h, w, b, y, chunk=128)
    got = torch.autograd.grad(fused, params)
    assert float(fused) == pytest.approx(float(reference), abs=1e-12)
    for e, g in zip(expected, got):
        assert torch.allclose(e, g, atol=1e-14, rtol=1e-10)


def test_task_losses_equal_the_models_own_losses(tmp_path):
    """The trainer's losses (output layer fused into the cross-entropy) equal what GPT2LMHeadModel and
    BertForMaskedLM compute themselves on the same batch."""
    for kind in ("clm", "mlm"):
        recipe = tiny(kind)
        task = tasks.task_for(recipe)
        model = training_recipes.build_model(recipe, task).eval()  # no dropout: both passes see the same network
        batch = task.batch(1)
        with torch.no_grad():
            ours = float(task.loss(model, batch))
            theirs = float(model(input_ids=batch["input_ids"], labels=batch["labels"]).loss)
        assert ours == pytest.approx(theirs, rel=1e-5), kind


def test_pixel_values_equal_the_image_processors():
    """The trainer's direct normalisation of synthetic images equals what the recipe's ViTImageProcessor makes of
    them (float32 rounding), and images of another size still go through the processor."""
    from anisotropy.data import images as data_images

    recipe = tiny("vit")
    processor = training_recipes.image_processor(recipe)
    images, _ = data_images.synthetic_shapes(6, recipe.image_size, seed=3)
    expected = processor(images=list(images), return_tensors="pt")["pixel_values"]
    got = training_recipes.pixel_values(images, processor)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert torch.allclose(got, expected, atol=1e-6)
    larger, _ = data_images.synthetic_shapes(2, 2 * recipe.image_size, seed=3)
    assert training_recipes.pixel_values(larger, processor).shape[-1] == recipe.image_size
