"""The checkpoint-suites page: the recipes' table and the names of the recipe sweep's variants, and what it asks of
a runtime."""

from __future__ import annotations

from anisotropy import profiles
from anisotropy.pages import budget, report
from anisotropy.training import trainer

# the transformers class each suite kind trains (the page's recipe table and provenance box)
CLASSES = {"mlm": "BertForMaskedLM", "char-mlm": "BertForMaskedLM over bytes", "clm": "GPT2LMHeadModel",
           "vit": "ViTForImageClassification", "cnn": "ResNetForImageClassification"}


def describe(name: str, runs) -> dict:
    """One row of the recipe table: the suite ``name`` and its first run's recipe (``runs``: the suite's runs)."""
    r = runs[0]
    text = r.kind in trainer.TEXT_KINDS
    return {
        "suite": name, "model class": CLASSES[r.kind], "seeds": ", ".join(str(x.seed) for x in runs),
        "width": r.width if r.kind != "cnn" else f"{r.width}→{r.width * 2 ** (r.depth - 1)} channels",
        "layers": r.depth if r.kind != "cnn" else f"{r.depth} stages", "heads": r.heads if r.kind != "cnn" else "-",
        "input": (f"{r.seq_len} {'bytes' if r.kind == 'char-mlm' else 'tokens'}" if text
                  else f"{r.image_size}px" + (f", {r.patch_size}px patches" if r.kind == "vit" else "")),
        "vocabulary": (256 + 5 if r.kind == "char-mlm" else r.vocab_size) if text else "-",
        "masked share": f"{r.mask_prob:.0%}" if r.kind in trainer.BERT_KINDS else "-",
        "positions": (r.positions.replace("_", " ") if r.kind in trainer.BERT_KINDS
                      else "absolute" if r.kind in ("clm", "vit") else "-"),
        "batch": r.batch_size, "updates": r.steps, "peak lr": r.lr, "warm-up": r.warmup, "dropout": r.dropout,
        "checkpoint steps": ", ".join(map(str, r.checkpoint_steps)),
    }


def variant(row) -> str:
    """The name of the recipe-sweep variant a sweep row (kind, pre_ln, mask, positions) belongs to."""
    if row.kind != "mlm":
        return "decoder / vision runs"
    if row.pre_ln:
        return "pre-LayerNorm, absolute positions"
    masked = "15% masked" if row["mask"] == 0.15 else "30-50% masked"
    return f"{'absolute' if row.positions == 'absolute' else 'relative'} positions, {masked}"


# how the page names the text suites
TEXT_NAMES = {"mlm": "the subword encoder", "clm": "the decoder", "char-mlm": "the byte-level encoder"}


def text_widths(recipes: dict) -> str:
    """The text suites' widths in words, "width 64 for the subword encoder and 96 for the decoder and ...", from
    ``recipes`` (suite name -> its runs)."""
    by_width: dict[int, list[str]] = {}
    for name, runs in recipes.items():
        if runs and runs[0].kind in trainer.TEXT_KINDS:
            by_width.setdefault(runs[0].width, []).append(TEXT_NAMES.get(name, name))
    if not by_width:
        return "no text model under this profile"
    parts = [f"{width} for {report.listing(names)}" for width, names in sorted(by_width.items())]
    return "width " + report.listing(parts)


def paper_scale() -> str:
    """What the `paper` profile trains instead of this page's recipes, in words, from its block of
    ``profiles/paper.yml``: suites with the same sizes grouped."""
    groups: dict[str, list[str]] = {}
    for name, s in profiles.chapter_parameters("paper", "checkpoint_suites").get("suites", {}).items():
        if s["kind"] in trainer.TEXT_KINDS:
            what = (f"width {s['width']}, {s['depth']} layers, {s['seq_len']}-token windows, {s['steps']:,} updates on "
                    f"{s.get('corpus', 'its corpus')}")
        elif s["kind"] == "vit":
            what = f"width {s['width']}, {s['depth']} layers, {s['image_size']}px images, {s['steps']:,} updates"
        else:
            what = f"{s['width']} channels in the first stage, {s['image_size']}px images, {s['steps']:,} updates"
        groups.setdefault(what, []).append(name)
    return "; ".join(f"{', '.join(names)}: {what}" for what, names in groups.items())


def plan(p: dict, out: budget.Plan) -> None:
    """Every seed of every suite of ``p["suites"]`` trained (``training.recipes.suite_specs``), ``workers`` runs at
    once (``training.trainer.train_many``; 0: one per core of the profile's runtime); nothing downloaded but a corpus
    other than the offline prose."""
    runs = sum(len(spec.get("seeds", [0])) for spec in p["suites"].values())
    at_once = min(p.get("workers") or budget.runtime(out.profile).cpus, runs)
    for name, spec in p["suites"].items():
        seeds = spec.get("seeds", [0])
        out.train(spec, len(seeds), names=[f"{name} seed {s}" for s in seeds], at_once=at_once, group=name,
                  sized_by=(f"suites.{name}.steps", f"suites.{name}.batch_size"))
