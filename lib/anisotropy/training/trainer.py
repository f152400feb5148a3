"""The small-model trainer and the self-trained checkpoint suites (MultiBERTs and Pythia in miniature): the training
loop, the suites of a profile trained in parallel, and the tables the suites chapter shows. The module a chapter calls.

A ``Recipe`` (``training.recipes``) fixes everything that determines the weights (kind, sizes, optimiser, steps, seed,
attention variant, precision). ``train(recipe)`` pretrains from scratch and saves checkpoints at log-spaced steps, step
0 (the initialisation) included, under ``paths.checkpoints_dir()/<suite>/<recipe-hash>/seed-<k>/step-<n>``
(``training.checkpoints``: the cache, or beside a results store moved to a folder of its own, such as Google Drive).
Each checkpoint is a standard ``save_pretrained`` folder of a standard ``transformers`` class with its tokenizer or
image processor, so ``registry.load(path)`` reads it like a MultiBERTs or Pythia revision, plus
``training_state.json`` (step, recipe, loss curves so far, baselines). The newest checkpoint also holds
``optimizer.pt`` for resuming (and ``grad_scaler.pt`` in float16).

Precision: a float32 recipe trains as it always did; a mixed one (``Recipe.precision``, float16 by default on CUDA)
runs the forward pass and the loss under ``torch.autocast`` in float16 with a gradient scaler (a step whose gradients
overflow is skipped and the scale halved), or in bfloat16 without one; weights and optimiser stay float32.

Determinism: the batch, the masking and the dropout of update ``k`` are drawn from ``SeedSequence([seed, k])``
(``training.tasks``), so a run has no random state to carry across an interruption: weights + optimiser state at step
``k`` determine the rest, and a resumed run ends bit-identical to an uninterrupted one (on CPU, same thread count and
library versions).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from anisotropy.data import sources, docstrings
from anisotropy import executor
from anisotropy.progress import Every, say
from anisotropy.training.checkpoints import (Checkpoint, checkpoints, claimed, drop_old_optimizer_states,
                                             fresh_state, in_training, is_trained, resumable, run_dir,
                                             save_checkpoint, training_state)
from anisotropy.training.recipes import (BERT_KINDS, TEXT_KINDS, Recipe, build_model, data_fingerprint, load_model,
                                         paragraph_batches, recipes, suite)
from anisotropy.training.tasks import prepare, task_for


# ---- the suites of a profile -----------------------------------------------------------------------------------------

def suite_checkpoints(name: str, profile: str = "local", progress: bool = True) -> dict[int, list["Checkpoint"]]:
    """``{seed: [Checkpoint, ...]}`` of a profile's suite, training whatever is not in the cache yet."""
    return {r.seed: train(r, progress=progress) for r in suite(name, profile)}


# ---- the training loop -----------------------------------------------------------------------------------------------

def make_optimizer(recipe: Recipe, model) -> torch.optim.Optimizer:
    """AdamW; biases, LayerNorm/BatchNorm weights and embeddings of positions are not decayed."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        (plain if p.ndim < 2 or "position" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, 0.98), eps=1e-6)


@contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to ``n`` inside the block (None: left as they are), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def autocast(recipe: Recipe, device: torch.device):
    """The recipe's autocast context (none in float32)."""
    dtype = getattr(torch, recipe.precision)
    return torch.autocast(device.type, dtype=dtype, enabled=recipe.precision != "float32")


def train(recipe: Recipe, out_dir: str | Path | None = None, progress: bool = True,
          snapshot_every_s: float = 300.0, threads: int | None = None, stop_after: int | None = None
          ) -> list[Checkpoint]:
    """Train ``recipe`` (or resume it, or reuse it if already trained) and return its checkpoints by step.

    ``out_dir`` replaces ``paths.checkpoints_dir()`` as the root of the suites. Besides the checkpoints, a resumable
    snapshot is written every ``snapshot_every_s`` seconds of training. ``stop_after`` stops after that many updates
    (as an interruption would; for tests and for spreading a long run over sessions). ``threads`` defaults to
    ``recipe.threads``; another count trains correctly but not bit-identically to the recipe's (it is recorded in
    ``training_state.json``).

    Training holds the run's lock (``checkpoints.claimed``): a run another process is training is waited for, then
    read, not trained again.
    """
    if is_trained(recipe, out_dir):
        return checkpoints(recipe, out_dir)
    with claimed(recipe, out_dir):
        if not is_trained(recipe, out_dir):  # else trained by the process this one waited for
            _train(recipe, out_dir, progress, snapshot_every_s, threads, stop_after)
    return checkpoints(recipe, out_dir)


def _train(recipe: Recipe, out_dir, progress: bool, snapshot_every_s: float, threads: int | None,
           stop_after: int | None) -> None:
    """``train``'s loop, the run's lock held."""
    run = run_dir(recipe, out_dir)
    device = torch.device(recipe.device)
    task = task_for(recipe)
    ckpt_steps, eval_steps = set(recipe.checkpoint_steps), set(recipe.eval_steps)
    # the cores this process may use: torch's own default can exceed a container's quota
    threads = threads or recipe.threads or executor.cores()
    with torch_threads(threads), torch.random.fork_rng(
            devices=[device] if device.type == "cuda" else []):
        # float16's narrow range needs the loss scaled before the backward pass; disabled, the scaler passes through
        scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "float16")
        resume = resumable(run)
        if resume is not None:
            state = json.loads((resume / "training_state.json").read_text())
            model = load_model(recipe, resume).to(device)
            optimizer = make_optimizer(recipe, model)
            optimizer.load_state_dict(torch.load(resume / "optimizer.pt", map_location=device, weights_only=True))
            if scaler.is_enabled():
                scaler.load_state_dict(torch.load(resume / "grad_scaler.pt", weights_only=True))
        else:
            model = build_model(recipe, task).to(device)
            optimizer = make_optimizer(recipe, model)
            state = fresh_state(recipe, task, threads)
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
            with torch.no_grad(), autocast(recipe, device):
                state["validation"].append({"step": step, **task.evaluate(model, device)})
            model.train()

        if start == 0 and not state["validation"]:
            validate(0)
            folder = run / "step-0"
            save_checkpoint(folder, model, task, checkpoint_state(0), optimizer, scaler)
        last = recipe.steps if stop_after is None else min(recipe.steps, start + stop_after)
        bar = _progress_bar(recipe, start, progress)
        beat = Every(30.0)  # the build's console (the bar goes to the notebook, which drops it)
        for step in range(start + 1, last + 1):
            seed = int(np.random.SeedSequence([recipe.seed, step]).generate_state(1)[0])
            torch.manual_seed(seed)  # dropout of this update
            for group in optimizer.param_groups:
                group["lr"] = recipe.lr_at(step)
            batch = {k: v.to(device) for k, v in task.batch(step).items()}
            with autocast(recipe, device):
                loss = task.loss(model, batch)
            scaler.scale(loss).backward()
            if recipe.grad_clip > 0:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            state["train_loss"].append(float(loss.detach()))
            if step in eval_steps:
                validate(step)
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(state['train_loss'][-20:]):.3f}",
                            val=f"{state['validation'][-1]['loss']:.3f}", refresh=False)
            beat.say(lambda: f"training {recipe.suite} seed {recipe.seed}: update {step:,} of {recipe.steps:,}, "
                             f"loss {np.mean(state['train_loss'][-20:]):.3f}", force=step == last)
            if step in ckpt_steps:
                folder = run / f"step-{step}"
                save_checkpoint(folder, model, task, checkpoint_state(step), optimizer, scaler)
            elif step == last or time.perf_counter() - last_snapshot > snapshot_every_s:
                folder = run / f"resume-{step}"
                save_checkpoint(folder, model, task, checkpoint_state(step), optimizer, scaler)
            else:
                continue
            drop_old_optimizer_states(run, keep=folder)
            last_snapshot = time.perf_counter()
        bar.close()


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
    a parallel run ends bit-identical to a serial one (``tests/test_training.py``). What the runs share (the
    tokenizers, the token arrays of their corpora) is prepared here first, once. ``workers`` defaults to the cores
    (``executor.cores()``); 1 trains here, one run after another. ``progress`` prints one line per finished run (bars
    from several processes would interleave)."""
    recipe_list = list(recipe_list)
    # A run another process is training (the book build's training units) is waited for here, this process's core
    # lent meanwhile, rather than by a worker process, which would hold a core while it waits.
    for r in [r for r in recipe_list if not is_trained(r, out_dir) and in_training(r, out_dir)]:
        train(r, out_dir=out_dir, progress=False)
    todo = sorted((r for r in recipe_list if not is_trained(r, out_dir)), key=cost, reverse=True)
    for r in todo:
        prepare(r)  # once here rather than raced for by the workers
    started = time.perf_counter()

    def done(job, found: list[Checkpoint]) -> None:
        if progress and found:
            state = training_state(found[-1])
            say(f"trained {job[0].suite} seed {job[0].seed}: {state['step']} updates, final validation "
                               f"loss {found[-1].loss:.3f}, {state['seconds']:.0f} s ({state['cpu_seconds']:.0f} s "
                               f"CPU) [{time.perf_counter() - started:.0f} s since the start]")

    if todo:
        n = min(workers or executor.cores(), len(todo))
        if progress:
            say(f"training {len(todo)} run(s) on {n} worker process(es): "
                               f"{', '.join(f'{r.suite} seed {r.seed}' for r in todo)}")
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
    out = {"corpus": corpus, "description": sources.SOURCES[corpus].description if corpus in sources.SOURCES else corpus}
    for split in ("train", "validation"):  # counted a batch at a time: WikiText-103's train split is ~540 MB
        sizes = np.array([(len(batch), sum(map(len, batch))) for batch in paragraph_batches(corpus, split)]).sum(0)
        out[f"{split}_paragraphs"], out[f"{split}_chars"] = int(sizes[0]), int(sizes[1])
    out |= {"content_hash": data_fingerprint("mlm", 0, corpus), "packages": {}, "train_documents": None,
            "validation_documents": None}
    if corpus == "docstrings":
        found = docstrings.docstring_corpus()
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
    # cost: pulls pandas (~0.7 s) into every training unit's process (book.units), which writes no table
    from anisotropy import results
    import pandas as pd

    return pd.DataFrame([{"suite": c.suite, "seed": c.seed, "step": c.step, "loss": c.loss, "path": results.checkpoint_key(c.path)["folder"]}
                         for r in recipe_list for c in checkpoints(r, out_dir)])


__all__ = ["Recipe", "Checkpoint", "TEXT_KINDS", "BERT_KINDS", "recipes", "suite", "suite_checkpoints", "train",
           "train_many", "torch_threads", "cost", "checkpoints", "training_state", "loss_curves", "summary",
           "corpus_summary", "checkpoint_table"]
