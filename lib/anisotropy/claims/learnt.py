"""Did a run learn? The book's one definition of a model that learnt, and the targets its self-trained suites were
chosen to meet.
"""

from __future__ import annotations

import pandas as pd

# Two bars, for two questions, both here:
# - ``claims.learnt``: the book's one definition of a model that learnt, the bar below which a run says what early
#   optimisation does rather than what learning does. Its validation loss is at least LEARNT_NATS below the loss of
#   the model that ignores the input: the unigram model of the same tokens for a language model, chance for a
#   classifier. The ablation's runs (``ablation_unanswerable``), the real models' check and Section 5's notes on its
#   runs read it.
# - ``suite_targets``: the higher bars the book's recipes were chosen to meet (the checkpoint suites chapter), per
#   suite. A run may have learnt without meeting its suite's target; the targets say whether the stand-ins are good
#   enough models, not whether they learnt at all.
LEARNT_NATS = 0.5
#: The self-trained suites' targets on held-out data (not the papers'): nats below the unigram baseline (the subword
#: encoder 1, the decoder 2), the most the validation loss may exceed the training loss at the end (nats, every
#: language model: it learnt the language, not the corpus), and the least accuracy (the vision transformer).
TARGET_NATS_BELOW_UNIGRAM = {"mlm": 1.0, "clm": 2.0}
TARGET_MAX_GAP = 0.25
TARGET_ACCURACY = {"vit": 0.75}


def blind_loss(baselines: dict) -> float:
    """The loss (nats) of the model that ignores the input, from a run's ``baselines``: the unigram model's for a
    language model, chance for a classifier."""
    return float(baselines["unigram"] if "unigram" in baselines else baselines["chance"])


def learnt(loss: float, baselines: dict) -> bool:
    """Whether a run whose validation loss is ``loss`` (nats) learnt: at least ``LEARNT_NATS`` below
    ``blind_loss(baselines)``."""
    return blind_loss(baselines) - loss >= LEARNT_NATS


def run_learnt(state: dict) -> bool:
    """Whether a self-trained run learnt, from its training record (``training.training_state``: its
    ``validation`` curve, read at its last point, and its ``baselines``)."""
    return learnt(state["validation"][-1]["loss"], state["baselines"])


def learnt_words(model: str, nats: float, unigram_nats: float) -> str:
    """``claims.learnt`` for a language model, as the sentence a page prints about ``model`` (losses in nats a token)."""
    gain = unigram_nats - nats
    verdict = "a model that learnt" if learnt(nats, {"unigram": unigram_nats}) else "not a model that learnt"
    return (f"{model} is {verdict} by the book's definition: {gain:.2f} nats a token below the unigram model "
            f"(at least {LEARNT_NATS} asked)")


def target_losses(baselines: pd.DataFrame) -> dict[str, float]:
    """The validation loss (nats) each suite's target asks for, from a frame of ``suite`` and ``unigram`` columns
    (suites with a target in nats only): the line a loss-curve figure draws."""
    unigram = baselines.set_index("suite")["unigram"]
    return {name: float(unigram[name]) - below for name, below in TARGET_NATS_BELOW_UNIGRAM.items()
            if name in unigram.index}


def suite_targets(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per target of the suites in ``summary`` (``training.summary``: one row per run, columns ``suite``,
    ``final_loss``, ``final_train_loss``, ``unigram``, ``accuracy``): ``suite``, ``target`` (what is asked),
    ``reached`` (the worst seed's value, in words) and ``met``."""
    rows = []
    runs = summary.groupby("suite", sort=False)
    unigram, worst = runs["unigram"].first(), runs["final_loss"].max()
    gap = (summary["final_loss"] - summary["final_train_loss"]).groupby(summary["suite"], sort=False).max()
    for name, below in TARGET_NATS_BELOW_UNIGRAM.items():
        if name in unigram.index:
            reached = unigram[name] - worst[name]
            rows.append({"suite": name, "target": f"validation loss >= {below:.1f} nats below the unigram baseline",
                         "reached": f"{reached:.2f} nats below (worst seed)", "met": bool(reached >= below)})
    for name in unigram.index:
        if pd.notna(unigram[name]):
            rows.append({"suite": name, "target": f"validation minus training loss < {TARGET_MAX_GAP} nats at the end",
                         "reached": f"{gap[name]:.2f} nats (worst seed)", "met": bool(gap[name] < TARGET_MAX_GAP)})
    for name, least in TARGET_ACCURACY.items():
        if name in unigram.index:
            accuracy = runs["accuracy"].min()[name]
            rows.append({"suite": name, "target": f"accuracy >= {100 * least:.0f}% on held-out shapes",
                         "reached": f"{100 * accuracy:.1f}%", "met": bool(accuracy >= least)})
    return pd.DataFrame(rows)
