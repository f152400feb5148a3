"""Self-trained checkpoints on disk: one run's folder (``<suite>/<recipe-hash>/seed-<k>``), its checkpoints by step
(``step-<n>``: a ``save_pretrained`` folder plus ``training_state.json``), the training record (``training_state``:
step, recipe, loss curves so far, baselines, timings, the trainer's fingerprint), resumable snapshots (``resume-<n>``,
``optimizer.pt``) and the runs no current recipe reaches (``stale_runs``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from anisotropy import fingerprint, paths
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


# ---- writing and resuming --------------------------------------------------------------------------------------------

def save_checkpoint(folder: Path, model, task, state: dict, optimizer=None) -> None:
    """Write ``folder`` at once (model, preprocessor, optional optimiser state, ``training_state.json`` last)."""
    def write(tmp: Path):
        model.save_pretrained(tmp)
        task.preprocessor.save_pretrained(tmp)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "training_state.json").write_text(json.dumps(state, indent=1))  # written last: marks completeness

    if folder.exists() and folder.name.startswith("resume-"):
        shutil.rmtree(folder)
    paths.atomic_folder(folder, write)


def resumable(run: Path) -> Path | None:
    """The newest folder (checkpoint or snapshot) holding model, optimiser and state."""
    best = None
    for folder in [*run.glob("step-*"), *run.glob("resume-*")]:
        if (folder / "optimizer.pt").is_file() and (folder / "training_state.json").is_file():
            if best is None or _step_of(folder) > _step_of(best):
                best = folder
    return best


def drop_old_optimizer_states(run: Path, keep: Path) -> None:
    """Remove the run's snapshots and optimiser states except ``keep``'s: one resume point is enough."""
    for folder in [*run.glob("step-*"), *run.glob("resume-*")]:
        if folder == keep:
            continue
        if folder.name.startswith("resume-"):
            shutil.rmtree(folder, ignore_errors=True)
        elif (folder / "optimizer.pt").is_file():
            (folder / "optimizer.pt").unlink()


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
