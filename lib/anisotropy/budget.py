"""What a chapter will ask of a Colab runtime: the checkpoints and data it requests under given parameters, and
estimates of download, disk, GPU and CPU memory and time on a T4, computed from the registry's parameter counts and the
chapter's sample sizes (never typed by hand).

``plan(chapter, params)`` lists the requests (``Checkpoint`` and data sources); ``estimate(plan)`` turns them into
sizes and minutes; ``table`` is what a chapter page shows, and ``problems`` says what would not fit a free Colab
runtime (``COLAB``) with the largest setting that does. The estimates are rough by design (stated on the page): the
download assumes ``HUB_MB_PER_S``, the compute a fixed share of a T4's peak rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

# A free Colab runtime with a T4 (2026): GPU memory, host memory and disk, in GiB.
COLAB = {"gpu": 15.0, "ram": 12.7, "disk": 78.0, "hours": 12.0}  # hours: the longest session
T4_TFLOPS = {"float16": 65.0, "bfloat16": 65.0, "float32": 8.1}  # peak dense rates
EFFICIENCY = 0.3  # share of the peak a measurement loop reaches (small batches, hooks, copies to the CPU)
HUB_MB_PER_S = 80.0  # download rate from the Hub to a Colab runtime
LOAD_S = 5.0  # per checkpoint: opening the files, building the model, moving it to the GPU
GIB = 2**30
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Bytes per parameter in the files the Hub serves (the repos' own dtype), where it is not float32.
STORED_HALF = ("pythia-", "bloom-", "opt-", "llama-2-", "falcon-")
# Positions one example becomes, per modality, where the chapter does not set a length: a LibriSpeech utterance
# (about 7 s, 50 frames/s; Whisper's encoder always reads 30 s = 1500 frames), a 224 x 224 image in 16-pixel patches.
SPEECH_FRAMES, WHISPER_FRAMES, IMAGE_PATCHES = 350, 1500, 197
EXTRACTION_BATCH = 8  # texts per forward pass in Paper 2's measurements (spectral.profile)
CNN_MB_PER_IMAGE = 50.0  # float32 feature maps of one 224 x 224 image through a CNN's stages, kept per stage


@dataclass(frozen=True)
class Checkpoint:
    """One download-and-measure: a registry model at a revision, ``examples`` of ``positions`` each, read in
    ``dtype`` in batches of ``batch``; ``release``: deleted from the cache once measured; ``passes``: times it is
    loaded and run (downloaded once: a checkpoint loaded twice stays in the cache until its last pass)."""

    model: str
    revision: str | None = None
    examples: int = 0
    positions: int = 128
    dtype: str = "float32"
    batch: int = 8
    release: bool = False
    passes: int = 1


@dataclass
class Plan:
    """A chapter's requests: checkpoints, data sources with their example counts, and training compute."""

    chapter: str
    checkpoints: list[Checkpoint] = field(default_factory=list)
    data: list[tuple[str, int]] = field(default_factory=list)
    training_flops: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def requests(self) -> list[tuple[str, str | None]]:
        """(hub id, revision) of every checkpoint the chapter loads from the Hub, as ``registry.load`` asks for it."""
        from . import registry

        out = []
        for c in self.checkpoints:
            s = registry.spec(c.model)
            if not s.local_package:
                out.append(s.hub_location(c.revision))
        return out


# ---- per chapter: which parameters name checkpoints and data ------------------------------------------------------

def _pretrained(models, variant="pretrained") -> list[str]:
    return list(models) if variant == "pretrained" else []


def _text(p: dict, names, n: int, length: int, dtype: str = "float32", batch: int | None = None) -> list[Checkpoint]:
    return [Checkpoint(m, None, n, length, dtype, batch or p.get("batch_size", 8)) for m in names]


def _section3(p: dict, plan: Plan) -> None:
    if "models" in p:  # token- and character-level pages
        names = _pretrained(p["models"], p["variant"]) + list(p.get("pretrained", []))
        plan.checkpoints += _text(p, names, p["n_samples"], p["max_length"])
        plan.data.append((p["source"], p["n_samples"]))
        return
    speech = _pretrained(p["speech_models"], p["variant"])
    vision = _pretrained(p["vit_models"] + p["cnn_models"], p["variant"])
    plan.checkpoints += [Checkpoint(m, None, p["n_speech"], WHISPER_FRAMES if "whisper" in m else SPEECH_FRAMES,
                                    batch=p["batch_size"]) for m in speech]
    plan.checkpoints += [Checkpoint(m, None, p["n_images"], IMAGE_PATCHES, batch=p["batch_size"]) for m in vision]
    plan.data += [(p["speech_source"], p["n_speech"]), (p["image_source"], p["n_images"])]


def _drift(p: dict, plan: Plan) -> None:
    plan.notes.append("reads the measurements the three Section 3 chapters stored (same models, same data): it "
                      "downloads nothing they did not")


def _untrained_block(p: dict, plan: Plan) -> None:
    names = _pretrained(p["reference_models"], p["reference_variant"])
    plan.checkpoints += [Checkpoint(m, None, p["reference_texts"], p["reference_max_length"], batch=16) for m in names]


def _qk_training(p: dict, plan: Plan) -> None:
    from . import registry

    if p["encoder"] == "multiberts":
        for seed in p["seeds"]:
            revisions = p["revisions"] or registry.spec(f"multiberts-seed-{seed}").revisions
            # the first seed's checkpoints are loaded again for the vector samples of the figures
            plan.checkpoints += [Checkpoint(f"multiberts-seed-{seed}", r, p["n_samples"], p["max_length"],
                                            batch=p["batch_size"], release=True,
                                            passes=2 if seed == p["seeds"][0] else 1) for r in revisions]
    plan.data.append((p["datasets"]["text"], p["n_samples"]))


def _recipe_flops(recipe: dict) -> float:
    """Training compute of one recipe: 6 x parameters x tokens (images: patches)."""
    width, depth = recipe.get("width", 128), recipe.get("depth", 4)
    params = 12 * depth * width**2 + recipe.get("vocab_size", 256) * width
    if recipe.get("kind") in ("vit", "cnn"):
        positions = (recipe.get("image_size", 32) // recipe.get("patch_size", 4)) ** 2
    else:
        positions = recipe.get("seq_len", 128)
    return 6.0 * params * positions * recipe.get("batch_size", 16) * recipe.get("steps", 600)


def _suites(p: dict, plan: Plan) -> None:
    for spec in p["suites"].values():
        plan.training_flops += _recipe_flops(spec) * len(spec.get("seeds", [0]))
        if spec.get("corpus", "prose") != "prose":
            plan.data.append((spec["corpus"], 0))


def _ablation(p: dict, plan: Plan) -> None:
    plan.training_flops += _recipe_flops(p["recipe"]) * len(p["variants"]) * len(p["seeds"])
    if p["recipe"].get("corpus", "prose") != "prose":
        plan.data.append((p["recipe"]["corpus"], 0))


def _paper2(p: dict, plan: Plan) -> None:
    dtype = p.get("dtype", "float32")
    names = list(p.get("pretrained", [])) + _pretrained(p.get("models", []), p.get("variant", "pretrained"))
    # Paper 2's batch_size counts vectors per metric batch; texts go through the model 8 at a time.
    plan.checkpoints += _text(p, names, p["n_texts"], p["max_length"], dtype, EXTRACTION_BATCH)
    for key in ("pythia", "bloom"):
        for name in p.get(f"{key}_models", []):
            from . import registry

            revisions, _ = registry.checkpoint_revisions(name, p[f"{key}_revisions"])
            plan.checkpoints += [Checkpoint(name, r, p["n_texts"], p["max_length"], dtype, EXTRACTION_BATCH, True)
                                 for r in revisions]
    plan.data.append((p["source"], p["n_texts"]))


CHAPTERS = {
    "p1_s3_token_level": _section3, "p1_s3_character_level": _section3, "p1_s3_modalities": _section3,
    "p1_s3_drift": _drift, "p1_s4_untrained_block": _untrained_block, "p1_s5_qk_training": _qk_training,
    "checkpoint_suites": _suites, "beyond_sharp_without_anisotropy": _ablation, "p2_layer_profiles": _paper2,
    "p2_training_dynamics": _paper2, "p2_two_measures": _paper2, "p2_counterpoint_pythia": _paper2,
}


def plan(chapter: str, params: dict) -> Plan:
    """The checkpoints, data and training a chapter requests with ``params`` (its resolved parameters)."""
    out = Plan(chapter)
    if chapter in CHAPTERS:
        CHAPTERS[chapter](params, out)
    return out


# ---- sizes and time -----------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _shape(model: str) -> tuple[int, int, int]:
    """(width, layers, heads) of a registry model's config (1, 1, 1 where it has none, e.g. a CNN)."""
    from transformers import AutoConfig

    from . import registry

    config = dict(registry.spec(model).config or {})
    if not config:
        return 1, 1, 1
    cfg = AutoConfig.for_model(config.pop("model_type"), **config)
    get = lambda *names: next((getattr(cfg, n) for n in names if isinstance(getattr(cfg, n, None), int)), 1)  # noqa
    return (get("hidden_size", "n_embd", "d_model"), get("num_hidden_layers", "n_layer", "num_layers"),
            get("num_attention_heads", "n_head", "num_heads"))


def weights_gib(model: str, dtype: str = "float32") -> float:
    from . import registry

    return (registry.spec(model).n_params or 0) * BYTES.get(dtype, 4) / GIB


def download_gib(model: str) -> float:
    """Size of a checkpoint's weights as the Hub stores them (half precision for the families that publish it)."""
    return weights_gib(model, "float16" if model.startswith(STORED_HALF) else "float32")


def _gpu_gib(c: Checkpoint) -> float:
    from . import registry

    s = registry.spec(c.model)
    width, layers, heads = _shape(c.model)
    batch = min(c.batch, max(c.examples, 1))
    if s.family == "cnn":
        activations = batch * CNN_MB_PER_IMAGE * 2**20
    else:  # every layer's hidden states are kept for one batch, and one layer's attention scores
        activations = batch * c.positions * (width * (layers + 1) + heads * c.positions) * BYTES.get(c.dtype, 4)
    return weights_gib(c.model, c.dtype) + activations / GIB


def estimate(p: Plan) -> dict:
    """Rough needs of a plan: ``download_gib``, peak ``disk_gib`` (kept checkpoints + the largest released one +
    data), peak ``gpu_gib`` and ``ram_gib`` (one model at a time), and ``t4_minutes``."""
    from . import data

    downloads = [download_gib(c.model) for c in p.checkpoints if not _local(c.model)]
    data_gib = sum((data.SOURCES[s].download_mb if n else data.SOURCES[s].train_mb + data.SOURCES[s].download_mb)
                   for s, n in dict.fromkeys(p.data) if s in data.SOURCES) / 1024  # n = 0: a training corpus
    kept = sum(download_gib(c.model) for c in p.checkpoints if not c.release and not _local(c.model))
    released = max([download_gib(c.model) for c in p.checkpoints if c.release] or [0.0])
    # The first MultiBERTs seed stays in the cache until its vectors are sampled.
    kept += sum(download_gib(c.model) for c in p.checkpoints if c.release and c.passes > 1)
    flops = {c: 2.0 * _params(c.model) * c.examples * c.positions * c.passes for c in p.checkpoints}
    compute_s = sum(f / (T4_TFLOPS.get(c.dtype, 8.1) * 1e12 * EFFICIENCY) for c, f in flops.items())
    compute_s += p.training_flops / (T4_TFLOPS["float32"] * 1e12 * EFFICIENCY)
    seconds = (sum(downloads) + data_gib) * 1024 / HUB_MB_PER_S + compute_s + LOAD_S * sum(
        c.passes for c in p.checkpoints)
    return {"checkpoints": len(p.checkpoints), "download_gib": sum(downloads) + data_gib,
            "disk_gib": kept + released + data_gib, "gpu_gib": max([_gpu_gib(c) for c in p.checkpoints] or [0.0]),
            "ram_gib": max([weights_gib(c.model, c.dtype) for c in p.checkpoints] or [0.0]) + 1.5,
            "t4_minutes": seconds / 60, "forward_tflop": sum(flops.values()) / 1e12}


def _params(model: str) -> float:
    from . import registry

    return float(registry.spec(model).n_params or 0)


def _local(model: str) -> bool:
    from . import registry

    return bool(registry.spec(model).local_package)


def problems(p: Plan, e: dict | None = None) -> list[str]:
    """What would not fit a free Colab runtime, each with the largest setting that does."""
    e = e or estimate(p)
    out = []
    if e["gpu_gib"] > COLAB["gpu"]:
        too_big = sorted({c.model for c in p.checkpoints if _gpu_gib(c) > COLAB["gpu"]})
        half = [m for m in too_big if weights_gib(m, "float16") * 1.3 < COLAB["gpu"]]
        fits = [c.model for c in p.checkpoints if _gpu_gib(c) <= COLAB["gpu"]]
        largest = max(fits, key=_params) if fits else None
        out.append(f"GPU memory: {', '.join(too_big)} need more than a T4's {COLAB['gpu']:.0f} GiB in "
                   f"{p.checkpoints[0].dtype}" + (f"; in float16 {', '.join(half)} would fit" if half else "")
                   + (f"; the largest model that fits as set is {largest}" if largest else ""))
    if e["disk_gib"] > COLAB["disk"]:
        out.append(f"disk: about {e['disk_gib']:.0f} GiB at the peak, more than Colab's {COLAB['disk']:.0f} GiB; "
                   f"measure fewer checkpoints or keep ANISOTROPY_KEEP_CHECKPOINTS unset")
    if e["t4_minutes"] > COLAB["hours"] * 60:
        share = COLAB["hours"] * 60 / e["t4_minutes"]
        out.append(f"time: about {_minutes(e['t4_minutes'])}, longer than a Colab session ({COLAB['hours']:.0f} h); "
                   f"about {share:.0%} of the work (fewer seeds, variants, steps or checkpoints) fits one session")
    if e["ram_gib"] > COLAB["ram"]:
        out.append(f"host memory: loading needs about {e['ram_gib']:.0f} GiB, more than Colab's "
                   f"{COLAB['ram']:.1f} GiB; use dtype float16 or a smaller model")
    return out


def table(chapter: str, params: dict):
    """The page's Colab budget: one row per quantity, value and what a free Colab runtime offers."""
    import pandas as pd

    p = plan(chapter, params)
    e = estimate(p)
    rows = [("checkpoints loaded", f"{e['checkpoints']}", ""),
            ("download (models and data)", _gib(e["download_gib"]), ""),
            ("disk at the peak", _gib(e["disk_gib"]), f"{COLAB['disk']:.0f} GiB"),
            ("GPU memory at the peak", _gib(e["gpu_gib"]), f"{COLAB['gpu']:.0f} GiB (T4)"),
            ("host memory at the peak", _gib(e["ram_gib"]), f"{COLAB['ram']:.1f} GiB"),
            ("time on a T4", _minutes(e["t4_minutes"]), "")]
    return pd.DataFrame(rows, columns=["quantity", "estimate", "free Colab"])


def _gib(x: float) -> str:
    return f"{x * 1024:.0f} MiB" if x < 1 else f"{x:.1f} GiB"


def _minutes(m: float) -> str:
    return f"{max(m, 0.1):.1f} min" if m < 90 else f"{m / 60:.1f} h"


def describe(chapter: str, params: dict) -> str:
    """What the chapter measures from the Hub with ``params``, in words: hub ids (with their number of revisions)
    and the data, e.g. "the pretrained bert-base-uncased and gpt2 on 2,000 examples of WikiText-103 ..."."""
    from . import data, registry

    p = plan(chapter, params)
    counts: dict[str, int] = {}
    for c in p.checkpoints:
        counts[c.model] = counts.get(c.model, 0) + 1
    names = [f"{registry.spec(m).hub_id}" + (f" ({k} checkpoints)" if k > 1 else "") for m, k in counts.items()]
    used = [f"{n:,} examples of {data.SOURCES[s].description}" for s, n in dict.fromkeys(p.data) if n
            and s in data.SOURCES]
    if not names:
        return p.notes[0] if p.notes else "no pretrained model"
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"the pretrained {listed}" + (f" on {' and '.join(used)}" if used else "")


def summary(chapter: str, params: dict) -> str:
    """One sentence for the narrative: what the chapter downloads and how long it takes on a T4, or why it does not
    fit."""
    p = plan(chapter, params)
    e = estimate(p)
    if not p.checkpoints and not p.training_flops:
        return "it downloads no model" + (f" ({p.notes[0]})" if p.notes else "")
    if not p.checkpoints:
        text = f"about {_minutes(e['t4_minutes'])} of training on a Colab T4 and {_gib(e['download_gib'])} of data"
    else:
        text = (f"about {_minutes(e['t4_minutes'])} on a Colab T4, {e['checkpoints']} checkpoint"
                f"{'s' if e['checkpoints'] != 1 else ''} and {_gib(e['download_gib'])} of downloads")
    issues = problems(p, e)
    return text + (f"; it does not fit a free Colab as set ({'; '.join(issues)})" if issues else "")
