"""The networks of benchmarks/bench_native_frameworks.py: the torch module that d5pipe's side traces
and the bare torch loop trains, and the same network as a Keras user builds it (issue #59).

* ResNet-50: Keras's ``keras.applications.ResNet50`` (v1), and in torch d5pipe's ResNet-50 in that
  layout (:func:`torch_resnet`).
* ViT: d5pipe's built-in ``vit_b16`` (transformers' ``ViTForImageClassification``; ``--vit tiny``:
  the same class at width 64, 2 layers, 2 heads, MLP 128, for a smoke run), and in Keras
  keras_hub's ``ViTImageClassifier`` over a ``ViTBackbone`` when keras_hub imports, else the same
  network in plain Keras 3 layers (:func:`keras_plain_vit`: a ``Conv2D`` patch embedding, a class
  token and position embeddings, ``LayerNormalization``, ``MultiHeadAttention``, ``Dense`` with
  the exact GELU), which is what a Keras user writes without it.

Each side's parameter count is checked (:func:`check_size`: ResNet-50's Keras's 25,583,592 trainable
ones at 1000 classes; ViT's from its sizes), so that every side computes the same network.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

VIT = {"b16": (768, 12, 12, 3072, 16), "tiny": (64, 2, 2, 128, 16)}
"""``--vit``: width, layers, heads, MLP width, patch size."""


def torch_resnet(a: argparse.Namespace) -> Any:
    """Keras's ResNet-50 (v1) in torch, for d5pipe's side and the bare torch loop: d5pipe's ResNet-50
    (torchvision's v1.5, d5pipe.levels.models.resnet) with each block's stride moved from its 3x3
    to its first 1x1 convolution, a bias on every convolution and batch norms' eps 1.001e-5, as
    keras.applications.ResNet50 builds them (v1.5 computes about 6% more), so that every side
    computes the same network (``--network d5pipe``: d5pipe's own, v1.5)."""
    import torch
    from torch import nn

    from d5pipe.levels.models import build_model

    model = build_model({"name": "resnet", "depth": 50}, (3, a.image, a.image), a.classes)
    if a.network == "d5pipe":
        return model
    for m in model.modules():
        if hasattr(m, "conv3"):  # a bottleneck
            m.conv1.stride, m.conv2.stride = m.conv2.stride, (1, 1)  # type: ignore[method-assign,assignment]
        if isinstance(m, nn.Conv2d):
            m.bias = nn.Parameter(torch.zeros(m.out_channels))
        if isinstance(m, nn.BatchNorm2d):
            m.eps = 1.001e-5
    return model


def torch_vit(a: argparse.Namespace) -> Any:
    """d5pipe's ``vit_b16`` (``--vit tiny``: its class, smaller; no dropout either way)."""
    from d5pipe.levels.models import Adapter, build_model

    if a.vit == "b16":
        return build_model({"name": "vit_b16"}, (3, a.image, a.image), a.classes)
    import transformers

    width, layers, heads, mlp, patch = VIT[a.vit]
    sizes: dict[str, Any] = {"image_size": a.image, "patch_size": patch, "num_channels": 3, "num_labels": a.classes,
                             "hidden_size": width, "num_hidden_layers": layers, "num_attention_heads": heads,
                             "intermediate_size": mlp, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    config = transformers.ViTConfig(**sizes)
    return Adapter(transformers.ViTForImageClassification(config), input_name="pixel_values", output="logits")


def torch_network(a: argparse.Namespace) -> Any:
    """The torch module of d5pipe's side and the bare loop, seeded, torch's threads pinned."""
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = torch_vit(a) if a.model == "vit_b16" else torch_resnet(a)
    if a.model == "vit_b16" or a.network == "keras":
        check_size("torch", sum(p.numel() for p in model.parameters()), a)
    return model


def keras_plain_vit(a: argparse.Namespace) -> Any:
    """ViT in plain Keras 3 layers (pre-norm blocks, the class token's output to the head)."""
    import keras
    from keras import layers, ops

    width, depth, heads, mlp, patch = VIT[a.vit]
    tokens = (a.image // patch) ** 2 + 1

    class Embed(layers.Layer):  # the class token first, then the position embeddings added
        def build(self, shape: Any) -> None:
            self.cls = self.add_weight(shape=(1, 1, width), initializer="zeros", name="cls")
            self.pos = self.add_weight(shape=(1, tokens, width), initializer="random_normal", name="pos")

        def call(self, x: Any) -> Any:
            cls = ops.broadcast_to(self.cls, (ops.shape(x)[0], 1, width))
            return ops.concatenate([cls, x], axis=1) + self.pos

    images = keras.Input((a.image, a.image, 3))
    x = layers.Conv2D(width, patch, strides=patch)(images)
    x = Embed()(layers.Reshape((tokens - 1, width))(x))
    for _ in range(depth):
        y = layers.LayerNormalization(epsilon=1e-12)(x)
        x = x + layers.MultiHeadAttention(heads, width // heads)(y, y)
        y = layers.LayerNormalization(epsilon=1e-12)(x)
        x = x + layers.Dense(width)(layers.Dense(mlp, activation=keras.activations.gelu)(y))
    x = layers.LayerNormalization(epsilon=1e-12)(x)
    return keras.Model(images, layers.Dense(a.classes)(x[:, 0]))


def keras_vit(a: argparse.Namespace) -> tuple[Any, str]:
    """keras_hub's ViT classifier when keras_hub imports, else :func:`keras_plain_vit`; and which."""
    if importlib.util.find_spec("keras_hub") is None:
        return keras_plain_vit(a), "plain Keras 3 layers (keras_hub is not installed)"
    import keras_hub

    width, layers, heads, mlp, patch = VIT[a.vit]
    backbone = keras_hub.models.ViTBackbone(image_shape=(a.image, a.image, 3), patch_size=patch, num_layers=layers,
                                            num_heads=heads, hidden_dim=width, mlp_dim=mlp)
    return (keras_hub.models.ViTImageClassifier(backbone, num_classes=a.classes, preprocessor=None, compile=False),
            f"keras_hub {keras_hub.__version__} ViTImageClassifier")


def keras_network(a: argparse.Namespace) -> tuple[Any, str]:
    """The Keras model of the native side (logits out, NHWC in), and what it is."""
    import keras

    keras.utils.set_random_seed(0)
    if a.model == "vit_b16":
        model, what = keras_vit(a)
    else:
        model, what = (keras.applications.ResNet50(weights=None, input_shape=(a.image, a.image, 3),
                                                   classes=a.classes, classifier_activation=None),
                       "keras.applications.ResNet50")
    check_size("Keras", sum(int(w.numpy().size) for w in model.trainable_weights), a)
    return model, what


def vit_parameters(a: argparse.Namespace) -> int:
    """ViT's parameter count at ``--vit``, ``--image`` and ``--classes`` (86,567,656 for ViT-B/16 at
    224x224 and 1000 classes, d5pipe.levels.zoo.PUBLISHED_PARAMETERS)."""
    width, layers, _, mlp, patch = VIT[a.vit]
    tokens = (a.image // patch) ** 2 + 1
    block = 4 * (width * width + width) + 2 * 2 * width + (width * mlp + mlp) + (mlp * width + width)
    return (3 * patch * patch * width + width) + width + tokens * width + layers * block + 2 * width + (
        width * a.classes + a.classes)


def check_size(side: str, n: int, a: argparse.Namespace) -> int:
    """``n``, the parameter count of ``side``'s network, if it is the one every side computes."""
    want = vit_parameters(a) if a.model == "vit_b16" else 25_583_592 if a.classes == 1000 else n
    if n != want:
        raise RuntimeError(f"the {side} network has {n} parameters, not {want}: the sides would differ")
    return n
