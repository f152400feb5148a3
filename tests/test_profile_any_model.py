"""``profile`` of any Hugging Face model of the papers' three modalities (issue 57): tiny random configurations of
fourteen architectures, built here and saved with ``save_pretrained`` (text with the packaged offline tokenizers,
images and speech with an image processor or feature extractor built from its class), are profiled on text, on a
folder of images and on a folder of audio files; each layer's mean cosine, drift norm, vector count and width (and its
sigma_1 share, where Paper 2's batch holds every vector of the layer) equal those computed here from
``model(**inputs, output_hidden_states=True)`` with transformers and numpy alone.

Which vectors count, the rule of ``measure.taps`` written out again here:

- text: one vector per token of each text; padding and the tokens the tokenizer marks special
  (``return_special_tokens_mask``: BERT-style [CLS]/[SEP], T5's </s>) are left out; each text is run alone here (no
  padding at all), batches of eight padded on the right in the profile, so padding is seen to leak nothing;
- images: a vision transformer's token states, the tokens in front of the patch grid left out in every layer (ViT's
  CLS, DINOv2's CLS and register tokens: the embeddings' tokens less (H / patch) (W / patch)), none of Swin's; a
  CNN's stage maps flattened to one vector of C * H * W per image;
- speech: the encoder's frames of each clip's real audio (wav2vec 2.0-like: ``_get_feat_extract_output_lengths`` of
  its samples; Whisper: the feature extractor's attention mask at the encoder's stride 2), clips decoded with
  soundfile, mixed to mono and brought to 16 kHz with ``scipy.signal.resample_poly``, run in the profile's batches of
  eight (a padded batch changes wav2vec 2.0's group-normalised features, so the batches are the same here).

The registry has a model_type for seven of them (Llama, T5, ViT, ConvNeXt, ResNet, wav2vec 2.0, Whisper: its layout
is copied, and T5's encoder saved alone is read as an encoder); the other seven (Qwen2, Mistral, DeBERTa-v2, Swin,
DINOv2 with registers, RegNet, WavLM) get a spec derived from the model (``registry.generic_spec``).
"""

from __future__ import annotations

from math import gcd

import numpy as np
import pandas as pd
import pytest
import torch

from anisotropy.book import cli
from anisotropy.data import sources
from anisotropy.experiments import model_profile
from anisotropy.models import registry
from anisotropy.models.offline_tokenizers import offline_tokenizer

N_TEXTS = 12  # prose paragraphs: hundreds of token vectors per layer
N_IMAGES = model_profile.MIN_VECTORS  # a CNN's layer holds one vector per image
N_CLIPS = 10
BATCH = model_profile.EXTRACTION_BATCH
SIZE = 32  # pixels of the image processors' input
TOLERANCE = dict(rtol=1e-5, atol=1e-6)  # float32 hidden states: padding and batch shapes change the last bits


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Each test its own results store and cache, and no network."""
    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ---- the tiny models ------------------------------------------------------------------------------------------------

def _text_models():
    import transformers as tf

    bpe, wordpiece, unigram = (offline_tokenizer(k) for k in ("bpe", "wordpiece", "unigram"))
    decoder = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=256)
    return {
        "llama": (lambda: tf.LlamaModel(tf.LlamaConfig(vocab_size=len(bpe), **decoder)), bpe),
        "qwen2": (lambda: tf.Qwen2Model(tf.Qwen2Config(vocab_size=len(bpe), **decoder)), bpe),
        "mistral": (lambda: tf.MistralModel(tf.MistralConfig(vocab_size=len(bpe), **decoder)), bpe),
        "deberta-v2": (lambda: tf.DebertaV2Model(tf.DebertaV2Config(
            vocab_size=len(wordpiece), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=256, relative_attention=True, position_buckets=32,
            pos_att_type=["p2c", "c2p"], pad_token_id=wordpiece.pad_token_id)), wordpiece),
        "t5-encoder": (lambda: tf.T5EncoderModel(tf.T5Config(
            vocab_size=len(unigram), d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4,
            pad_token_id=unigram.pad_token_id, eos_token_id=unigram.eos_token_id)), unigram),
    }


def _vision_models():
    import transformers as tf

    vit = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=SIZE,
               patch_size=8)
    cnn = dict(hidden_sizes=[8, 16], depths=[1, 1])
    return {
        "vit": (lambda: tf.ViTModel(tf.ViTConfig(**vit), add_pooling_layer=False),
                lambda: tf.ViTImageProcessor(size={"height": SIZE, "width": SIZE})),
        "dinov2-registers": (lambda: tf.Dinov2WithRegistersModel(tf.Dinov2WithRegistersConfig(
            **vit, num_register_tokens=4)), lambda: tf.BitImageProcessor(
                size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE})),
        "swin": (lambda: tf.SwinModel(tf.SwinConfig(image_size=SIZE, patch_size=4, embed_dim=16, depths=[1, 1],
                                                    num_heads=[2, 2], window_size=4)),
                 lambda: tf.ViTImageProcessor(size={"height": SIZE, "width": SIZE})),
        # its first stage's map, 8 x 8 x 160 = 10,240 wide, is past batches.SCATTER_MAX_DIM: its sigma_1 share comes
        # from the 64 x 64 Gram matrix of the images' vectors
        "convnext": (lambda: tf.ConvNextModel(tf.ConvNextConfig(num_stages=2, hidden_sizes=[160, 16], depths=[1, 1])),
                     lambda: tf.ConvNextImageProcessor(size={"shortest_edge": SIZE})),
        "resnet": (lambda: tf.ResNetModel(tf.ResNetConfig(embedding_size=8, layer_type="basic", **cnn)),
                   lambda: tf.ConvNextImageProcessor(size={"shortest_edge": SIZE})),
        "regnet": (lambda: tf.RegNetModel(tf.RegNetConfig(embedding_size=4, groups_width=8, **cnn)),
                   lambda: tf.ConvNextImageProcessor(size={"shortest_edge": SIZE})),
    }


def _speech_models():
    import transformers as tf

    bpe = offline_tokenizer("bpe")  # the decoder's vocabulary, unused here
    encoder = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                   conv_dim=(16,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    return {
        "wav2vec2": (lambda: tf.Wav2Vec2Model(tf.Wav2Vec2Config(**encoder)), tf.Wav2Vec2FeatureExtractor),
        "wavlm": (lambda: tf.WavLMModel(tf.WavLMConfig(**encoder, num_buckets=32, max_bucket_distance=64)),
                  tf.Wav2Vec2FeatureExtractor),
        "whisper": (lambda: tf.WhisperModel(tf.WhisperConfig(
            vocab_size=len(bpe), **{f"{t}_token_id": bpe.pad_token_id for t in ("pad", "bos", "eos", "decoder_start")},
            d_model=32, encoder_layers=2, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_source_positions=1500, max_target_positions=64)), tf.WhisperFeatureExtractor),
    }


TEXT, VISION, SPEECH = list(_text_models()), list(_vision_models()), list(_speech_models())
GENERIC = {"qwen2", "mistral", "deberta-v2", "swin", "dinov2-registers", "regnet", "wavlm"}


def _save(folder, build_model, preprocessor):
    torch.manual_seed(0)
    build_model().save_pretrained(folder)
    preprocessor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> the folder of its tiny random model with its preprocessor."""
    root = tmp_path_factory.mktemp("tiny-models")
    folders = {}
    for name, (build, tok) in _text_models().items():
        folders[name] = _save(root / name, build, tok)
    for name, (build, processor) in _vision_models().items():
        folders[name] = _save(root / name, build, processor())
    for name, (build, extractor) in _speech_models().items():
        folders[name] = _save(root / name, build, extractor())
    return folders


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """Random RGB pictures of several sizes (the processors resize them), and one grey and one RGBA picture."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(N_IMAGES):
        h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
        pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        mode = {0: "L", 1: "RGBA"}.get(i, "RGB")
        Image.fromarray(pixels).convert(mode).save(folder / f"img-{i:03d}.png")
    (folder / "notes.txt").write_text("not an image")  # left alone
    return folder


@pytest.fixture(scope="module")
def audio_folder(tmp_path_factory):
    """Clips of 0.4 to 1.4 s of tones and noise: most at 16 kHz, some at 8 and 22.05 kHz, one in stereo."""
    import soundfile

    folder = tmp_path_factory.mktemp("audio")
    rng = np.random.default_rng(0)
    for i in range(N_CLIPS):
        rate = {1: 8000, 2: 22050}.get(i % 4, 16000)
        t = np.arange(int(rate * rng.uniform(0.4, 1.4))) / rate
        wave = 0.3 * np.sin(2 * np.pi * rng.uniform(100, 800) * t) + 0.05 * rng.standard_normal(t.size)
        if i == 3:
            wave = np.stack([wave, 0.5 * wave], axis=1)
        soundfile.write(folder / f"clip-{i:02d}.{'flac' if i % 2 else 'wav'}", wave, rate)
    return folder


# ---- the ground truth: hidden states with transformers alone ---------------------------------------------------------

def _mean_cosine(x: np.ndarray) -> float:
    """Mean cosine over ordered pairs i != j, with numpy in float64."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    s = u.sum(axis=0)
    return float((s @ s - len(u)) / (len(u) * (len(u) - 1)))


def _text_vectors(folder, texts) -> list[np.ndarray]:
    import transformers

    # the class it was saved as (AutoModel would give T5's encoder a decoder)
    model_class = getattr(transformers, transformers.AutoConfig.from_pretrained(folder).architectures[0])
    tok, model = transformers.AutoTokenizer.from_pretrained(folder), model_class.from_pretrained(folder).eval()
    layers: list[list] = []
    with torch.inference_mode():
        for text in texts:  # alone: no padding
            enc = tok([text], truncation=True, max_length=128, return_tensors="pt", return_special_tokens_mask=True)
            keep = ~enc.pop("special_tokens_mask")[0].bool()
            hidden = model(**enc, output_hidden_states=True).hidden_states
            for i, h in enumerate(hidden):
                (layers.append([]) if i == len(layers) else None)
                layers[i].append(h[0][keep].double().numpy())
    return [np.concatenate(rows) for rows in layers]


def _image_vectors(folder, image_folder) -> list[np.ndarray]:
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel

    processor, model = AutoImageProcessor.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    images = [Image.open(f).convert("RGB") for f in sorted(image_folder.glob("*.png"))]
    pixels = processor(images, return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        hidden = model(pixel_values=pixels, output_hidden_states=True).hidden_states
    if hidden[0].ndim == 4:  # stage maps: one flattened vector per image
        return [h.reshape(h.shape[0], -1).double().numpy() for h in hidden]
    patch = model.config.patch_size
    prefix = hidden[0].shape[1] - (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch)
    return [h[:, prefix:].reshape(-1, h.shape[-1]).double().numpy() for h in hidden]


def _clips(audio_folder) -> list[np.ndarray]:
    import soundfile
    from scipy.signal import resample_poly

    clips = []
    for f in sorted(p for p in audio_folder.iterdir() if p.suffix in (".wav", ".flac")):
        wave, rate = soundfile.read(f, dtype="float32", always_2d=True)
        wave = wave.mean(axis=1)
        g = gcd(rate, 16000)
        clips.append((resample_poly(wave, 16000 // g, rate // g) if rate != 16000 else wave).astype(np.float32))
    return clips


def _speech_vectors(folder, audio_folder) -> list[np.ndarray]:
    from transformers import AutoFeatureExtractor, AutoModel

    extractor, model = AutoFeatureExtractor.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    clips = _clips(audio_folder)
    layers: list[list] = []
    with torch.inference_mode():
        for start in range(0, len(clips), BATCH):
            batch = clips[start:start + BATCH]
            if model.config.model_type == "whisper":  # its extractor pads every clip to 30 s
                feats = extractor(batch, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
                hidden = model.encoder(feats["input_features"], output_hidden_states=True).hidden_states
                keep = feats["attention_mask"][:, ::2].bool()
            else:
                feats = extractor(batch, sampling_rate=16000, padding=True, return_tensors="pt",
                                  return_attention_mask=True)
                inputs = {"input_values": feats["input_values"]}
                if extractor.return_attention_mask:
                    inputs["attention_mask"] = feats["attention_mask"]
                hidden = model(**inputs, output_hidden_states=True).hidden_states
                frames = model._get_feat_extract_output_lengths(torch.tensor([c.size for c in batch]))
                keep = torch.arange(hidden[0].shape[1])[None, :] < frames[:, None]
            for i, h in enumerate(hidden):
                (layers.append([]) if i == len(layers) else None)
                layers[i].append(h[keep].double().numpy())
    return [np.concatenate(rows) for rows in layers]


def _check(table: pd.DataFrame, vectors: list[np.ndarray]):
    assert table["layer"].tolist() == list(range(len(vectors)))
    for layer, x in enumerate(vectors):
        row = table.iloc[layer]
        assert (row["n"], row["dim"]) == x.shape, layer
        np.testing.assert_allclose(row["mean_cosine"], _mean_cosine(x), **TOLERANCE, err_msg=f"layer {layer}")
        np.testing.assert_allclose(row["drift_norm"], np.linalg.norm(x.mean(axis=0)), rtol=1e-5)
        if row["spectral_vectors"] == len(x):  # one batch of every vector, in some order: sigma_1 share is theirs
            s = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
            np.testing.assert_allclose(row["sigma1_share"], s[0] ** 2 / (s ** 2).sum(), rtol=1e-5)
    assert table["sigma1_share"].between(0, 1).all() and (table["twonn_dimension"] > 0).all()


# ---- the tests ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TEXT)
def test_a_text_model_against_its_hidden_states(name, models):
    texts = sources.load("prose", N_TEXTS, seed=0)
    table = model_profile.profile(str(models[name]), n=N_TEXTS)
    _check(table, _text_vectors(models[name], texts))
    assert set(table["stack"]) == {"decoder" if name in ("llama", "qwen2", "mistral") else "encoder"}


@pytest.mark.parametrize("name", VISION)
def test_an_image_model_against_its_hidden_states(name, models, image_folder):
    table = model_profile.profile(str(models[name]), images=image_folder)
    _check(table, _image_vectors(models[name], image_folder))
    assert set(table["modality"]) == {"vision"} and set(table["data"]) == {image_folder.name}


@pytest.mark.parametrize("name", SPEECH)
def test_a_speech_model_against_its_hidden_states(name, models, audio_folder):
    table = model_profile.profile(str(models[name]), audio=audio_folder)
    _check(table, _speech_vectors(models[name], audio_folder))
    assert set(table["modality"]) == {"speech"}


def test_the_generic_specs_come_from_the_models_themselves(models):
    """Seven of the architectures have no registry entry: their spec is derived from the model's class (its input,
    whether it has attention, transformers' task tables); the other seven keep their registry entry's layout."""
    found = {name: registry.load(folder).spec for name, folder in models.items()}
    assert {n for n, s in found.items() if s.notes.endswith("loaded by transformers' AutoModel")} == GENERIC
    kinds = {n: (s.modality, s.layout, s.stack) for n, s in found.items()}
    assert kinds["qwen2"] == kinds["mistral"] == ("text", "hidden_states", "decoder")
    assert kinds["deberta-v2"] == ("text", "hidden_states", "encoder")
    assert kinds["t5-encoder"] == ("text", "hidden_states", "encoder")  # the registry's T5, its encoder alone
    assert kinds["swin"] == kinds["dinov2-registers"] == ("vision", "hidden_states", "encoder")
    assert kinds["regnet"] == ("vision", "hidden_states", "convolutional")
    assert kinds["wavlm"] == ("speech", "speech-encoder", "encoder")
    assert (kinds["vit"], kinds["convnext"], kinds["whisper"]) == (("vision", "vit", "encoder"),
                                                                  ("vision", "cnn", "convolutional"),
                                                                  ("speech", "whisper", "encoder-decoder"))


def _run(capsys, *args) -> tuple[int, str]:
    code = cli.main(["profile", *map(str, args)])
    return code, capsys.readouterr().err


def test_the_command_takes_images_and_audio_folders(models, image_folder, audio_folder, tmp_path, capsys):
    assert _run(capsys, models["swin"], "--images", image_folder, "--out", tmp_path / "img")[0] == 0
    table = pd.read_parquet(tmp_path / "img" / "profile.parquet")
    assert table["mean_cosine"].tolist() == model_profile.profile(str(models["swin"]),
                                                                  images=image_folder)["mean_cosine"].tolist()
    assert _run(capsys, models["wavlm"], "--audio", audio_folder, "--n", 4, "--out", tmp_path / "wav")[0] == 0
    table = pd.read_parquet(tmp_path / "wav" / "profile.parquet")
    assert (table["n_examples"] == 4).all() and (tmp_path / "wav" / "verdicts.md").is_file()


def _one_line(capsys, *args) -> str:
    code, err = _run(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    return lines[0]


def test_what_cannot_be_profiled_stops_in_one_line(models, image_folder, audio_folder, tmp_path, capsys):
    out = tmp_path / "out"
    line = _one_line(capsys, models["vit"], "--n", 4, "--out", out)
    assert "is a vision model but the examples are text: give a folder of images (--images DIR)" in line
    line = _one_line(capsys, models["qwen2"], "--images", image_folder, "--out", out)
    assert "is a text model but the examples are vision" in line
    line = _one_line(capsys, models["wavlm"], "--images", image_folder, "--out", out)
    assert "give a folder of audio files (--audio DIR)" in line
    assert "no file ending in .png" in _one_line(capsys, models["vit"], "--images", audio_folder, "--out", out)
    assert "no such folder" in _one_line(capsys, models["vit"], "--images", tmp_path / "nowhere", "--out", out)
    line = _one_line(capsys, models["resnet"], "--images", image_folder, "--n", 8, "--out", out)
    assert f"fewer than {model_profile.MIN_VECTORS}: give more images" in line
    # a model_type transformers does not know, and a text model without a tokenizer: what is supported, in one line
    import json
    import shutil

    odd = shutil.copytree(models["qwen2"], tmp_path / "odd")
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "model_type": "no-such-type"}))
    line = _one_line(capsys, odd, "--n", 4, "--out", out)
    assert "supported: text models with a tokenizer" in line and "image models" in line and "speech" in line
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(models["qwen2"] / f, no_tokenizer / f)
    line = _one_line(capsys, no_tokenizer, "--n", 4, "--out", out)
    assert "a text model without a tokenizer that AutoTokenizer loads" in line and "supported:" in line
    assert not out.exists()
