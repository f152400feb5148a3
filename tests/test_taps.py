"""taps.extract on every registry entry (tiny random models of the exact classes), against counts and vectors
derived independently: from the configs, the tokenizers' masks, the audio lengths and direct forward passes."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from anisotropy.data import sources
from anisotropy.measure import metrics, taps
from anisotropy.models import registry
from anisotropy.models.registry import MODELS

TEXTS = ["Anisotropy makes hidden representations close to each other in angle.",
         "A short one.",
         "The interpreter reads the program text, converts it into tokens, and hands them to the parser, "
         "which builds the tree that the compiler turns into bytecode.",
         "Names refer to objects."]
RATE = 16_000
AUDIO_SAMPLES = (8000, 12345, 20000)  # 0.5 s, 0.77 s, 1.25 s


@pytest.fixture(scope="module")
def audio():
    rng = np.random.default_rng(0)
    return [0.1 * rng.standard_normal(n).astype(np.float32) for n in AUDIO_SAMPLES]


@pytest.fixture(scope="module")
def images():
    return sources.load("synthetic-shapes", 3, seed=0, size=40)


def _conv_frames(n: int, config) -> int:
    """Frames of the wav2vec 2.0 / HuBERT feature encoder: L -> floor((L - k) / s) + 1 per convolution."""
    for k, s in zip(config.conv_kernel, config.conv_stride):
        n = (n - k) // s + 1
    return max(n, 0)


def _text_counts(tok, texts, max_length=128):
    enc = tok(texts, truncation=True, max_length=max_length, return_special_tokens_mask=True)
    lengths = [len(ids) for ids in enc["input_ids"]]
    specials = [sum(m) for m in enc["special_tokens_mask"]]
    return lengths, specials


def _expected(loaded, examples, batch_size):
    """[(n_layers, dim, vectors per layer)] per part, from the config and the inputs alone."""
    c, s = loaded.model.config, loaded.spec
    if s.layout == "hidden_states":
        lengths, specials = _text_counts(loaded.preprocessor, examples)
        return [(c.num_hidden_layers + 1, c.hidden_size, sum(lengths) - sum(specials))]
    if s.layout == "encoder-decoder":
        lengths, specials = _text_counts(loaded.preprocessor, examples)
        assert specials == [1] * len(examples)  # </s>
        # Decoder: the start token (special) then the input without its last token (</s>).
        n = sum(lengths) - len(examples)
        return [(c.num_layers + 1, c.d_model, n), (c.num_decoder_layers + 1, c.d_model, n)]
    if s.layout == "canine":
        lengths, _ = _text_counts(loaded.preprocessor, examples)
        rate, molecules = c.downsampling_rate, 0
        for start in range(0, len(lengths), batch_size):  # a batch is padded to its longest text
            batch = lengths[start:start + batch_size]
            n_mol = max(batch) // rate
            # A molecule is real where its window of characters holds one; the [CLS] molecule is special.
            molecules += sum(min(math.ceil(n / rate), n_mol) - 1 for n in batch)
        chars = sum(lengths) - 2 * len(lengths)
        return [(2, c.hidden_size, chars), (c.num_hidden_layers + 1, c.hidden_size, molecules),
                (2, c.hidden_size, chars)]
    if s.layout == "speech-encoder":
        return [(c.num_hidden_layers + 1, c.hidden_size, sum(_conv_frames(len(a), c) for a in examples))]
    if s.layout == "whisper":
        return [(c.encoder_layers + 1, c.d_model, sum(math.ceil(len(a) / 320) for a in examples))]
    if s.layout == "vit":
        patches = (c.image_size // c.patch_size) ** 2
        return [(c.num_hidden_layers + 1, c.hidden_size, len(examples) * patches)]
    raise AssertionError(s.layout)


TOKEN_MODELS = [n for n, s in MODELS.items() if s.config is not None and s.layout not in ("cnn", "spatial-stages")]


@pytest.mark.parametrize("name", TOKEN_MODELS)
def test_token_models_layers_dims_and_masks(name, audio, images):
    loaded = registry.load(name, variant="tiny")
    examples = {"text": TEXTS, "speech": audio, "vision": images}[loaded.spec.modality]
    result = taps.extract(loaded, examples, batch_size=3)
    layer = 0
    for n_layers, dim, n in _expected(loaded, examples, batch_size=3):
        for i in range(n_layers):
            stats = result[layer]
            assert (stats.dim, stats.n) == (dim, n), f"{name} layer {layer}"
            assert result.layer_in_part[layer] == i
            layer += 1
    assert sorted(result) == list(range(layer)), f"{name}: layers {sorted(result)}"
    parts = list(dict.fromkeys(result.parts.values()))
    assert parts == {"encoder-decoder": ["encoder", "decoder"], "canine": ["character", "downsampled", "upsampled"],
                     "whisper": ["encoder"]}.get(loaded.spec.layout, ["layers"])


def test_special_tokens_are_configurable():
    loaded = registry.load("bert-base-uncased", variant="tiny")
    lengths, specials = _text_counts(loaded.preprocessor, TEXTS)
    default = taps.extract(loaded, TEXTS)
    kept = taps.extract(loaded, TEXTS, keep_special=True)
    assert default[1].n == sum(lengths) - 2 * len(TEXTS) and kept[1].n == sum(lengths)
    padded = len(TEXTS) * max(lengths)
    assert default.n_masked[1] + default[1].n == padded and kept.n_masked[1] == padded - sum(lengths)


def test_inputs_are_cut_to_the_position_table():
    """A model with 16 positions (as self-trained ones have 128) takes at most 16 tokens per text, special tokens
    included, whatever max_length asks for; and position_limit reads RoBERTa's table net of its padding offset."""
    loaded = registry.load("bert-base-uncased", variant="tiny")
    loaded.model = type(loaded.model)(loaded.model.config.__class__(**{**loaded.model.config.to_dict(),
                                                                      "max_position_embeddings": 16}))
    assert taps.position_limit(loaded) == 16
    long_texts = [" ".join(TEXTS)] * 2
    kept = taps.extract(loaded, long_texts, max_length=128, keep_special=True)
    assert kept[1].n == 2 * 16
    roberta = registry.load("roberta-base", variant="tiny")
    assert taps.position_limit(roberta) == roberta.model.config.max_position_embeddings - 2


@pytest.mark.parametrize("name", ["bert-base-uncased", "gpt2", "opt-125m"])
def test_padding_does_not_leak_into_the_vectors(name):
    """The same texts batched with padding and one by one give the same statistics, and these equal the metrics of
    the content rows of direct forward passes."""
    loaded = registry.load(name, variant="tiny")
    batched = taps.extract(loaded, TEXTS, batch_size=4)
    single = taps.extract(loaded, TEXTS, batch_size=1)
    rows = {layer: [] for layer in batched}
    for text in TEXTS:
        enc = loaded.preprocessor(text, return_tensors="pt", return_special_tokens_mask=True)
        keep = ~enc.pop("special_tokens_mask")[0].bool()
        enc.pop("token_type_ids", None)
        with torch.no_grad():
            hs = loaded.model(**enc, output_hidden_states=True).hidden_states
        for layer in rows:
            rows[layer].append(hs[layer][0][keep])
    for layer in batched:
        direct = torch.cat(rows[layer])
        assert batched[layer].n == single[layer].n == direct.shape[0]
        assert batched[layer].mean_cosine == pytest.approx(metrics.mean_cosine(direct), abs=1e-5)
        assert single[layer].mean_cosine == pytest.approx(metrics.mean_cosine(direct), abs=1e-5)
        assert batched[layer].drift_norm == pytest.approx(metrics.drift_norm(direct), rel=1e-4)


def test_encoder_then_decoder_fed_the_shifted_input():
    loaded = registry.load("t5-base", variant="tiny")
    result = taps.extract(loaded, TEXTS, batch_size=4)
    n_enc = loaded.model.config.num_layers + 1
    enc_rows, dec_rows = [], []
    for text in TEXTS:
        ids = loaded.preprocessor(text, return_tensors="pt")["input_ids"]
        start = torch.tensor([[loaded.model.config.decoder_start_token_id]])
        with torch.no_grad():
            out = loaded.model(input_ids=ids, decoder_input_ids=torch.cat([start, ids[:, :-1]], dim=1),
                               output_hidden_states=True)
        enc_rows.append(out.encoder_hidden_states[-1][0, :-1])  # drop </s>
        dec_rows.append(out.decoder_hidden_states[-1][0, 1:])  # drop the start token
    assert result.parts[n_enc - 1] == "encoder" and result.parts[n_enc] == "decoder"
    assert result[n_enc - 1].mean_cosine == pytest.approx(metrics.mean_cosine(torch.cat(enc_rows)), abs=1e-5)
    assert result[max(result)].mean_cosine == pytest.approx(metrics.mean_cosine(torch.cat(dec_rows)), abs=1e-5)
    only = taps.extract(loaded, TEXTS, part="encoder")
    assert sorted(only) == list(range(n_enc))
    assert only[n_enc - 1].mean_cosine == pytest.approx(result[n_enc - 1].mean_cosine, abs=1e-6)


def test_canine_parts_are_selectable_with_global_layer_numbers():
    loaded = registry.load("canine-s", variant="tiny")
    whole = taps.extract(loaded, TEXTS)
    down = taps.extract(loaded, TEXTS, part="downsampled")
    layers = [layer for layer, part in whole.parts.items() if part == "downsampled"]
    assert sorted(down) == layers == list(range(2, 2 + loaded.model.config.num_hidden_layers + 1))
    assert all(down[layer].n == whole[layer].n for layer in layers)
    # Molecules are 4 characters: far fewer vectors than the character parts.
    assert whole[0].n > 3 * down[layers[0]].n and whole[max(whole)].n == whole[0].n
    with pytest.raises(ValueError, match="character, downsampled, upsampled"):
        taps.extract(loaded, TEXTS, part="molecules")


def test_whisper_crops_frames_and_appends_decoder_tokens(audio):
    loaded = registry.load("whisper-base", variant="tiny")
    frames = sum(math.ceil(len(a) / 320) for a in audio)  # 20 ms per encoder frame
    window = loaded.model.config.max_source_positions
    assert frames < len(audio) * window  # cropping matters: the padded window is longer than the audio
    texts = ["the cat sat", "on the mat today", "hello"]
    examples = [{"array": a, "sampling_rate": RATE, "text": t} for a, t in zip(audio, texts)]
    result = taps.extract(loaded, examples)
    n_enc = loaded.model.config.encoder_layers + 1
    assert all(result[layer].n == frames for layer in range(n_enc))
    tokens = sum(len(loaded.tokenizer(t)["input_ids"]) for t in texts)  # the start token is special
    assert [result.parts[layer] for layer in sorted(result)] == ["encoder"] * n_enc + ["decoder"] * (
        loaded.model.config.decoder_layers + 1)
    assert all(result[layer].n == tokens for layer in result if result.parts[layer] == "decoder")
    # Audio at another rate is resampled to 16 kHz first: 8 kHz half the samples, same duration, same frames.
    slow = [{"array": a[::2], "sampling_rate": 8000} for a in audio]
    assert taps.extract(loaded, slow)[0].n == sum(math.ceil(len(a[::2]) * 2 / 320) for a in audio)


@pytest.mark.parametrize("name,prefix", [("vit-base", 1), ("beit-base", 1), ("deit-base", 2)])
def test_vision_transformers_count_patches_and_optionally_the_prefix_tokens(name, prefix, images):
    loaded = registry.load(name, variant="tiny")
    c = loaded.model.config
    patches = (c.image_size // c.patch_size) ** 2
    assert taps.extract(loaded, images, keep_special=True)[1].n == len(images) * (patches + prefix)


def _cnn_maps(name, config):
    """[(channels, side)] of every map taps should flatten, for 32-pixel inputs, from the architecture alone."""
    h = config.hidden_sizes if hasattr(config, "hidden_sizes") else None
    if name == "resnet-50":  # stem /4, then strides 1, 2, 2, 2
        return [(config.embedding_size, 8), (h[0], 8), (h[1], 4), (h[2], 2), (h[3], 1)]
    if name == "convnext-base":  # patchify stem /4, then downsampling by 2 before stages 2-4
        return [(h[0], 8), (h[0], 8), (h[1], 4), (h[2], 2), (h[3], 1)]
    if name == "van-base":  # stages with strides 4, 2, 2, 2 (no stem output)
        return [(h[0], 8), (h[1], 4), (h[2], 2), (h[3], 1)]
    if name == "cvt-13":  # stage embeddings with strides 4, 2, 2
        return [(config.embed_dim[0], 8), (config.embed_dim[1], 4), (config.embed_dim[2], 2)]
    if name == "efficientnet-lite0":  # stem /2, then the 16 blocks of lite0 (width 0.25: channels 8 at least)
        blocks = [(8, 16)] + [(8, 8)] * 2 + [(16, 4)] * 2 + [(24, 2)] * 3 + [(32, 2)] * 3 + [(48, 1)] * 4 + [(80, 1)]
        return [(32, 16)] + blocks
    if name == "craft-vgg16-bn":  # VGG: one map per conv block (after its ReLU), 2x2 max pools at "M"
        maps, side = [], 32
        for v in config.cfg:
            if v == "M":
                side //= 2
            else:
                maps.append((v, side))
        return maps
    return None


CNN_MODELS = [n for n, s in MODELS.items() if s.layout == "cnn"]


@pytest.mark.parametrize("name", CNN_MODELS)
def test_cnn_maps_are_flattened_to_one_vector_per_image(name, images):
    loaded = registry.load(name, variant="tiny")
    result = taps.extract(loaded, images, batch_size=2)
    first = 1 if name in ("van-base", "cvt-13", "craft-vgg16-bn") else 0
    maps = _cnn_maps(name, loaded.model.config)
    if maps is None:  # EfficientNet: stem + one map per block
        c = loaded.model.config
        n_blocks = sum(math.ceil(c.depth_coefficient * r) for r in c.num_block_repeats)
        assert len(result) == 1 + n_blocks
    else:
        assert [result[layer].dim for layer in sorted(result)] == [ch * side * side for ch, side in maps]
    assert sorted(result) == list(range(first, first + len(result)))
    assert all(stats.n == len(images) and result.n_masked[layer] == 0 for layer, stats in result.items())
    # Flattening keeps every activation: the layer's mean vector is the mean of the flattened maps.
    pixels = loaded.preprocessor(list(images), return_tensors="pt", input_data_format="channels_last")["pixel_values"]
    with torch.no_grad():
        hs = loaded.model(pixel_values=pixels, output_hidden_states=True).hidden_states
    last = hs[-1].reshape(len(images), -1)
    assert np.allclose(result[max(result)].mean, last.mean(0).double().numpy(), atol=1e-5)


def test_mit_stages_give_one_vector_per_spatial_position(images):
    loaded = registry.load("mit-b0", variant="tiny")
    c = loaded.model.config
    result = taps.extract(loaded, images)
    sides = [8, 4, 2, 1]  # 32-pixel input, overlapping patch embeddings with strides 4, 2, 2, 2
    assert sorted(result) == [1, 2, 3, 4]
    assert [result[k].dim for k in sorted(result)] == list(c.hidden_sizes)
    assert [result[k].n for k in sorted(result)] == [len(images) * s * s for s in sides]


def test_layer_frame_is_tidy():
    loaded = registry.load("t5-base", variant="tiny")
    frame = taps.layer_frame(taps.extract(loaded, TEXTS), seed=7, variant="override")
    assert list(frame["layer"]) == list(range(len(frame)))
    assert frame["relative_depth"].iloc[0] == 0 and frame["relative_depth"].iloc[-1] == 1
    assert frame["relative_depth"].is_monotonic_increasing
    for col in ("part", "layer_in_part", "n_masked", "n", "mean_cosine", "drift_norm", "sigma1_share",
                "twonn_dimension", "model", "display"):
        assert col in frame, col
    assert set(frame["part"]) == {"encoder", "decoder"} and (frame["seed"] == 7).all()
    assert (frame["variant"] == "override").all() and (frame["model"] == "t5-base").all()


def test_streaming_accepts_generators_and_custom_accumulators():
    loaded = registry.load("gpt2", variant="tiny")
    made = []

    def factory(dim):
        made.append(metrics.LayerStats(dim, reservoir_size=5, seed=1))
        return made[-1]

    from_list = taps.extract(loaded, TEXTS, batch_size=2)
    from_gen = taps.extract(loaded, (t for t in TEXTS), batch_size=2, stats_factory=factory)
    assert len(made) == len(from_gen) and all(from_gen[k] is made[k] for k in from_gen)
    assert [from_gen[k].n for k in from_gen] == [from_list[k].n for k in from_list]
    assert from_gen[0].sample.shape[0] == 5


def test_bad_input():
    bert = registry.load("bert-base-uncased", variant="tiny")
    vit = registry.load("vit-base", variant="tiny")
    with pytest.raises(ValueError, match="text model but the examples look like vision"):
        taps.extract(bert, sources.load("synthetic-shapes", 2, size=32))
    with pytest.raises(ValueError, match="vision model but the examples look like text"):
        taps.extract(vit, TEXTS)
    with pytest.raises(ValueError, match="text model but the examples look like speech"):
        taps.extract(bert, sources.load("synthetic-speech", 1, seconds=(0.5, 0.5)))
    # a speech model's batches are cut by clip length (speech_chunks): the modality is checked before that reads them
    with pytest.raises(ValueError, match="speech model but the examples look like text"):
        taps.extract(registry.load("wav2vec2-base", variant="tiny"), TEXTS)
    with pytest.raises(ValueError, match="corpus is empty"):
        taps.extract(bert, [])
    with pytest.raises(ValueError, match="no vector was kept.*padding or special tokens"):
        taps.extract(bert, ["", ""])
    with pytest.raises(ValueError, match="single part"):
        taps.extract(bert, TEXTS, part="encoder")
    # A batch that is only padding and special tokens contributes nothing; the other batches still count.
    result = taps.extract(bert, ["", "", *TEXTS[:2]], batch_size=2)
    assert result[0].n == taps.extract(bert, TEXTS[:2])[0].n
    gpt2 = registry.load("gpt2", variant="tiny")  # adds no special tokens: "" is zero tokens
    with pytest.raises(ValueError, match="no vector was kept"):
        taps.extract(gpt2, [""])


def test_convertible_examples_give_the_same_vectors(images, audio):
    from PIL import Image

    vit = registry.load("vit-base", variant="tiny")
    img = images[0]
    reference = taps.extract(vit, [img], reservoir_size=64)[1].sample
    rgba = np.concatenate([img, np.full((*img.shape[:2], 1), 255, np.uint8)], axis=-1)
    for other in (img / 255.0, rgba, np.moveaxis(img, -1, 0), Image.fromarray(img), torch.from_numpy(img)):
        np.testing.assert_allclose(taps.extract(vit, [other], reservoir_size=64)[1].sample, reference, atol=1e-4)
    hubert = registry.load("hubert-base", variant="tiny")
    mono = taps.extract(hubert, audio[:1])
    stereo = taps.extract(hubert, [np.stack([audio[0], audio[0]])])  # (channels, samples): mixed to mono
    assert stereo[2].n == mono[2].n and stereo[2].mean_cosine == pytest.approx(mono[2].mean_cosine, abs=1e-6)


# ---- long speech on a small GPU: the front end's memory, and passes cut to fit it ---------------------------------

_FRONT_END_PEAK = """
import sys, torch
from transformers import Wav2Vec2Config
from transformers.models.wav2vec2.modeling_wav2vec2 import Wav2Vec2FeatureEncoder

def status(field):  # kB -> bytes; VmHWM is this process's own peak (getrusage's maxrss outlives exec on Linux)
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field)) * 1024

torch.set_num_threads(1)
batch, samples, norm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
encoder = Wav2Vec2FeatureEncoder(Wav2Vec2Config(feat_extract_norm=norm)).eval()
x = torch.randn(batch, samples)
with torch.inference_mode():
    encoder(x[:, :4000])  # allocator and kernels warmed up on a short clip
    before = status("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from here
    encoder(x)
print(status("VmHWM:") - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads Linux's per-process peak memory")
@pytest.mark.parametrize("norm", ["group", "layer"])  # wav2vec2-base / HuBERT-base, and the large lv60 models
def test_the_front_end_memory_formula_matches_an_allocation_measured_at_the_same_shapes(norm):
    import subprocess
    import sys

    from transformers import Wav2Vec2Config

    batch, samples = 2, 10 * 16_000
    # glibc's default allocator maps each large tensor and unmaps it when freed, so the peak is the tensors' own;
    # the kernels' settings (anisotropy's MALLOC_* defaults) keep freed memory to reuse it, which hides the peak.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _FRONT_END_PEAK, str(batch), str(samples), norm], capture_output=True,
                         text=True, check=True, env=env)
    measured = int(out.stdout.split()[-1])  # the process's peak resident memory grew by this much
    predicted = taps.front_end_bytes(Wav2Vec2Config(feat_extract_norm=norm), batch, samples)
    assert predicted == pytest.approx(measured, rel=0.15)


def test_speech_chunks_cut_long_clips_into_passes_under_the_limit_in_order():
    from transformers import Wav2Vec2Config

    config = Wav2Vec2Config()
    seconds = [1, 2, 35, 3, 30, 30, 1, 1, 1, 12]
    clips = [np.full(int(s * 16_000), i + 1, dtype=np.float32) for i, s in enumerate(seconds)]
    limit = taps.front_end_bytes(config, 2, 31 * 16_000)  # two 30 s clips fit, a 35 s one only alone
    chunks = list(taps.speech_chunks(clips, 4, config, limit=limit))
    flat = [int(c["array"][0]) - 1 for chunk in chunks for c in chunk]
    assert flat == list(range(len(seconds)))  # every clip once, in order, whole
    assert all(c["array"].size == int(seconds[int(c["array"][0]) - 1] * 16_000) for chunk in chunks for c in chunk)
    for chunk in chunks:
        longest = max(c["array"].size for c in chunk)
        assert len(chunk) <= 4
        assert len(chunk) == 1 or taps.front_end_bytes(config, len(chunk), longest) <= limit
    # greedy, in order: [1 s, 2 s] [35 s] [3 s, 30 s] [30 s, 1 s] [1 s, 1 s, 12 s] (a third 30 s-wide clip is over)
    assert [len(c) for c in chunks] == [2, 1, 2, 2, 3]
    # without a memory limit, the batch size alone cuts
    assert [len(c) for c in taps.speech_chunks(clips, 4, config, limit=1 << 62)] == [4, 4, 2]
