"""Whisper's greedy transcription (the converted ``transformers`` model, as CTranslate2's ``beam_size=1``) checked
against the ``ctranslate2`` runtime: encoder output, decoder logits, transcripts and their word error rates."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from anisotropy.models import weights

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
    - the word error rates of both against the spoken text (``word_error_rate``).

    Needs ``ctranslate2`` (a test and verification dependency, not a runtime one).
    """
    import ctranslate2

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
# Word error rate
# ---------------------------------------------------------------------------------------------------------------------

def word_errors(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Minimum number of word substitutions, deletions and insertions that turn ``reference`` into ``hypothesis``
    (Levenshtein distance over words; dynamic programming, O(len(reference) * len(hypothesis)))."""
    previous = list(range(len(hypothesis) + 1))
    for i, word in enumerate(reference, start=1):
        current = [i] + [0] * len(hypothesis)
        for j, other in enumerate(hypothesis, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other))
        previous = current
    return previous[-1]


def word_error_rate(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> float:
    """Corpus word error rate: the word errors of every (reference, hypothesis) pair of word lists, summed, over the
    total number of reference words (can exceed 1 when the hypotheses insert many words)."""
    if len(references) != len(hypotheses):
        raise ValueError(f"word_error_rate needs as many hypotheses as references, got {len(hypotheses)} and "
                         f"{len(references)}")
    total = sum(len(r) for r in references)
    if total == 0:
        raise ValueError("word_error_rate needs at least one reference word")
    return sum(word_errors(r, h) for r, h in zip(references, hypotheses)) / total
