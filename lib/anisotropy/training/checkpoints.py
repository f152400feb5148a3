"""Self-trained checkpoints on disk: one run's folder (``<suite>/<recipe-hash>/seed-<k>``), its checkpoints by step
(``step-<n>``: a ``save_pretrained`` folder plus ``training_state.json``), the training record (``training_state``:
step, recipe with its precision, loss curves so far, baselines, timings, the trainer's fingerprint), resumable
snapshots (``resume-<n>``, ``optimizer.pt``, ``grad_scaler.pt`` in float16) and the runs no current recipe reaches
(``stale_runs``).

Where the suites live (``root``, ``paths.checkpoints_dir``): beside the results store when the store was moved to a
folder of its own (``ANISOTROPY_RESULTS``, or a chapter's ``results_dir``: ``<results_dir>/checkpoints``, on Colab
Google Drive), so that a suite trained once, and a run cut off with its last snapshot, outlive the runtime as the
results do: the next runtime's chapters find the suite before they would train it, and ``train`` resumes the run.
Otherwise (the default store, a checkout's ``results/``, or a URL store) in ``cache_dir()/checkpoints``. A results key
names a checkpoint ``cache:checkpoints/<suite>/...`` in either place (``results.checkpoint_key``). Tokenizers and token
arrays stay in the cache: they are remade from the corpus, identically, in a new runtime.

Who trains a run holds its lock (``claimed``: an OS file lock of the run's folder, ``run_lock``), so that a process
that needs a run another one is training (a chapter, while the book build trains the suites as units of their own)
waits for it and then finds it trained, instead of training it a second time; while it waits, the build gives its
core to other work (``executor.waiting``).
"""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from anisotropy import executor, fingerprint, hub, paths, progress
from anisotropy.training.recipes import Recipe


# ---- checkpoints on disk ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checkpoint:
    """One saved model: ``path`` is a ``save_pretrained`` folder; ``loss`` the validation loss at ``step`` (nats)."""

    suite: str
    seed: int
    step: int
    path: Path
    loss: float


def root(out_dir: str | Path | None = None) -> Path:
    """The folder of the suites: ``out_dir`` if given, else ``paths.checkpoints_dir()`` (see the module's docstring)."""
    return Path(out_dir) if out_dir is not None else paths.checkpoints_dir()


def run_dir(recipe: Recipe, out_dir: str | Path | None = None) -> Path:
    return root(out_dir) / recipe.suite / recipe.hash / f"seed-{recipe.seed}"


def stale_runs(out_dir: str | Path | None = None) -> list[Path]:
    """Trained runs, tokenizers and token arrays that no recipe of the current code reaches: their trainer
    fingerprint (recorded in ``training_state.json``, or at the end of a tokenizer's or token array's folder name) is
    not the current one."""
    current = fingerprint.trainer()
    stale = []
    for run in sorted(root(out_dir).glob("*/*")):  # <suite>/<recipe hash>
        states = sorted(run.glob("seed-*/step-*/training_state.json"))
        trainer = json.loads(states[0].read_text()).get("versions", {}).get("trainer") if states else None
        if trainer != current:
            stale.append(run)
    if out_dir is None:
        stale += [t for kind in ("tokenizers", "tokens") for t in sorted((paths.cache_dir() / kind).glob("*"))
                  if not t.name.endswith(f"-t{current}")]
    return stale


def checkpoints(recipe: Recipe, out_dir: str | Path | None = None) -> list[Checkpoint]:
    """The checkpoints of ``recipe`` already on disk, by step (empty if never trained; partial if interrupted)."""
    found = []
    for folder in run_dir(recipe, out_dir).glob("step-*"):
        state_file = folder / "training_state.json"
        if hub.step(folder.name) is None or not state_file.is_file():  # a finished step-<n>, not a partial write
            continue
        state = json.loads(state_file.read_text())
        found.append(Checkpoint(recipe.suite, recipe.seed, state["step"], folder, state["validation"][-1]["loss"]))
    return sorted(found, key=lambda c: c.step)


def is_trained(recipe: Recipe, out_dir: str | Path | None = None) -> bool:
    done = checkpoints(recipe, out_dir)
    return bool(done) and done[-1].step == recipe.steps


def run_lock(recipe: Recipe, out_dir: str | Path | None = None):
    """The lock of ``recipe``'s run: a ``filelock.FileLock`` named after the run's folder, in the cache's ``locks``
    folder (an OS lock, which goes with its holder, so a killed run keeps none; on the machine's own disk, not beside
    the run, which may live on a network drive without OS locks, such as Google Drive on Colab)."""
    import hashlib

    from filelock import FileLock

    run = run_dir(recipe, out_dir).resolve()
    folder = paths.cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(str(run).encode()).hexdigest()[:16]
    return FileLock(folder / f"{recipe.suite}-seed-{recipe.seed}-{digest}.lock", thread_local=False)


@contextmanager
def claimed(recipe: Recipe, out_dir: str | Path | None = None):
    """The block holds ``recipe``'s run lock: at once, or, while another process trains the run, once that process
    lets it go, this process's core lent to the build meanwhile (``executor.waiting``)."""
    from filelock import Timeout

    lock = run_lock(recipe, out_dir)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress.say(f"waiting for {recipe.suite} seed {recipe.seed}, which another process is training")
        with executor.waiting():
            lock.acquire()
    try:
        yield
    finally:
        lock.release()


def in_training(recipe: Recipe, out_dir: str | Path | None = None) -> bool:
    """Whether another process holds ``recipe``'s run lock now (is training it)."""
    from filelock import Timeout

    lock = run_lock(recipe, out_dir)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def training_state(checkpoint: Checkpoint | str | Path) -> dict:
    """The ``training_state.json`` of a checkpoint (step, recipe, loss curves so far, baselines, timings)."""
    folder = checkpoint.path if isinstance(checkpoint, Checkpoint) else Path(checkpoint)
    return json.loads((folder / "training_state.json").read_text())


# ---- writing and resuming --------------------------------------------------------------------------------------------

def save_checkpoint(folder: Path, model, task, state: dict, optimizer=None, scaler=None) -> None:
    """Write ``folder`` at once (model, preprocessor, optional optimiser and float16 gradient scaler states,
    ``training_state.json`` last)."""
    def write(tmp: Path):
        model.save_pretrained(tmp)
        task.preprocessor.save_pretrained(tmp)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        if optimizer is not None and scaler is not None and scaler.is_enabled():
            torch.save(scaler.state_dict(), tmp / "grad_scaler.pt")
        (tmp / "training_state.json").write_text(json.dumps(state, indent=1))  # written last: marks completeness

    if folder.exists() and folder.name.startswith("resume-"):
        shutil.rmtree(folder)
    paths.atomic_folder(folder, write)


def resumable(run: Path) -> Path | None:
    """The newest folder (checkpoint or snapshot) holding model, optimiser and state."""
    found = [folder for folder in [*run.glob("step-*"), *run.glob("resume-*")]
             if (folder / "optimizer.pt").is_file() and (folder / "training_state.json").is_file()]
    # the update a folder was written at, as its record says (its name is only where it was put)
    return max(found, key=lambda folder: training_state(folder)["step"], default=None)


def drop_old_optimizer_states(run: Path, keep: Path) -> None:
    """Remove the run's snapshots and optimiser states except ``keep``'s: one resume point is enough."""
    for folder in [*run.glob("step-*"), *run.glob("resume-*")]:
        if folder == keep:
            continue
        if folder.name.startswith("resume-"):
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for name in ("optimizer.pt", "grad_scaler.pt"):
                (folder / name).unlink(missing_ok=True)


def fresh_state(recipe: Recipe, task, threads: int) -> dict:
    """The ``training_state.json`` of step 0; the loss lists grow along the run (train_loss[i] is update i + 1)."""
    import transformers

    return {"step": 0, "suite": recipe.suite, "seed": recipe.seed, "recipe": asdict(recipe),
            "recipe_hash": recipe.hash, "checkpoint_steps": list(recipe.checkpoint_steps),
            "baselines": task.baselines, "data": task.sizes, "train_loss": [], "validation": [],
            "seconds": 0.0, "cpu_seconds": 0.0, "threads": threads,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "trainer": fingerprint.trainer()},
            "rng": "update k draws its batch, masks and dropout from SeedSequence([seed, k])"}
