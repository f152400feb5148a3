"""The recipe sweep behind the self-trained suites' recipes (issue 17): held-out loss against training cost.

Trains every run of ``recipe_grid.json`` (name -> ``training.recipes.Recipe`` fields, plus the ``round`` of the sweep it
belonged to) and writes one JSON line per run to ``results/recipes.jsonl``: the recipe, the baselines, the validation
curve, the final validation and training losses and ``training.cost`` (multiply-adds, the CPU cost up to a constant).
The suites chapter plots it. Two experiment-only overrides, which no suite uses: ``_arch: preln`` trains
``RobertaPreLayerNormForMaskedLM`` (pre-LayerNorm) instead of BERT, ``_config`` sets fields of the model config.

The recorded sweep ran on a GPU (CUDA, 11-16 runs at a time on one H100, 2026-11-26), where it took minutes instead
of the hours it takes on two CPU cores. The GPU sums in another order than the CPU, so its weights differ in the last
bits; the losses came out as on the CPU (the chosen subword encoder, seed 0: 1.457 nats below the unigram baseline on
the GPU, 1.463 on the 2-core CPU; the decoder 2.124 and 2.119). ``--corpus FILE`` reads the
docstring corpus from a ``docstrings-*.json.gz`` of the cache instead of this installation's packages (a machine with
other package versions extracts another corpus).

    .venv/bin/python benchmarks/bench_recipes.py --device cuda --procs 16 [--only mlm-rel-s800-seed0 ...]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _use_corpus(file: str | None) -> None:
    from anisotropy.data import docstrings

    if file:
        corpus = docstrings.read_docstring_corpus(file)
        docstrings.docstring_corpus = lambda: corpus


def _preln() -> None:
    """Swap BERT for RoBERTa-PreLayerNorm (same sizes, LayerNorm before each sublayer), loss on masked positions."""
    import torch.nn.functional as F
    import transformers

    from anisotropy.training import recipes, tasks

    def model_config(r, vocab_size=None, special=None):
        return transformers.RobertaPreLayerNormConfig(
            vocab_size=vocab_size, hidden_size=r.width, num_hidden_layers=r.depth, num_attention_heads=r.heads,
            intermediate_size=4 * r.width, max_position_embeddings=r.seq_len + 2, hidden_dropout_prob=r.dropout,
            attention_probs_dropout_prob=r.dropout, type_vocab_size=1, attn_implementation="eager", **(special or {}))

    def loss(self, model, batch):
        hidden = model.roberta_prelayernorm(input_ids=batch["input_ids"]).last_hidden_state
        chosen = batch["labels"] != -100
        return F.cross_entropy(model.lm_head(hidden[chosen]), batch["labels"][chosen])

    recipes.model_config = model_config
    recipes.model_class = lambda kind: transformers.RobertaPreLayerNormForMaskedLM
    tasks._TextTask.loss = loss


def run(job: tuple) -> dict:
    name, spec, device, corpus, out_dir = job
    from anisotropy.training import trainer, checkpoints, recipes

    _use_corpus(corpus)
    spec = dict(spec)
    spec.pop("round", None)
    arch, extra = spec.pop("_arch", None), spec.pop("_config", {})
    if arch == "preln":
        _preln()
    if extra:
        plain = recipes.model_config
        recipes.model_config = lambda *a, **k: _with(plain(*a, **k), extra)
    recipe = recipes.Recipe(suite=name, device=device, **spec)
    start = time.perf_counter()
    found = trainer.train(recipe, out_dir=Path(out_dir) / name, progress=False)
    state = checkpoints.training_state(found[-1].path)
    validation = state["validation"]
    return {"name": name, "baselines": state["baselines"], "final": validation[-1], "curve": validation,
            "final_train_loss": round(sum(state["train_loss"][-50:]) / len(state["train_loss"][-50:]), 4),
            "cost": trainer.cost(recipe), "seconds": round(time.perf_counter() - start, 1)}


def _with(config, extra: dict):
    for key, value in extra.items():
        setattr(config, key, value)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--procs", type=int, default=os.cpu_count())
    parser.add_argument("--corpus", default=None, help="a cached docstrings-*.json.gz to train on")
    parser.add_argument("--only", nargs="*", default=None, help="names of runs in recipe_grid.json")
    parser.add_argument("--steps", type=int, default=None, help="cap every run at this many updates (a quick check)")
    parser.add_argument("--out", default=str(HERE / "results" / "recipes.jsonl"))
    parser.add_argument("--checkpoints", default="/tmp/anisotropy-recipe-sweep")
    args = parser.parse_args()
    grid = json.loads((HERE / "recipe_grid.json").read_text())
    names = args.only or list(grid)
    if args.steps:
        grid = {n: {**spec, "steps": min(spec["steps"], args.steps), "warmup": min(spec["warmup"], args.steps),
                    "eval_every": 0} for n, spec in grid.items()}
    from anisotropy.training import recipes

    _use_corpus(args.corpus)
    for name in names:  # the tokenizers once, before the workers start
        spec = {k: v for k, v in grid[name].items() if k != "round" and not k.startswith("_")}
        if spec["kind"] in recipes.TEXT_KINDS:
            recipes.tokenizer(recipes.Recipe(suite=name, **spec))
    jobs = [(n, grid[n], args.device, args.corpus, args.checkpoints) for n in names]
    # one process per run: the experiment-only overrides patch the trainer modules of their process
    with mp.get_context("spawn").Pool(args.procs, maxtasksperchild=1) as pool, open(args.out, "w") as out:
        for row in pool.imap_unordered(run, jobs):
            spec = grid[row["name"]]
            out.write(json.dumps({"round": spec.get("round"), "name": row["name"],
                                  "spec": {k: v for k, v in spec.items() if k != "round"}, **row}) + "\n")
            out.flush()
            print(row["name"], f"{row['final']['loss']:.3f}", flush=True)


if __name__ == "__main__":
    main()
