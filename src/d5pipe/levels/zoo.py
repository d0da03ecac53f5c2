"""Real networks by name: ResNet-50, ViT-B/16 and GPT-2 small, built by ``transformers`` from its
config classes with seeded random weights (nothing is downloaded).

Each is a built-in model (``model.name: resnet50``) registered like ``mlp`` (d5pipe.levels.targets)
and built with ``input_shape`` and ``n_classes``; each declares the one adapter a library model
needs (:class:`~d5pipe.levels.models.Adapter`: the keyword its input goes to, the output field
that holds the logits), so no per-model wrapper code exists. Architectures are the published ones
(the sizes below are ``transformers``' defaults for these configs); :data:`PUBLISHED_PARAMETERS`
holds the parameter counts the papers and reference implementations state, which a test checks.

* ``resnet50``: ``(3, H, W)`` images, any H, W >= 32 (the network is fully convolutional up to its
  global pooling); ``ResNetForImageClassification``, input ``pixel_values``.
* ``vit_b16``: ``(C, H, H)`` images, H a multiple of 16 (the positional embeddings are sized for
  H); ``ViTForImageClassification``, input ``pixel_values``.
* ``gpt2``: ``(T,)`` token ids, T <= 1024, vocabulary 50257 (``dataset.name: synthetic_tokens``);
  ``GPT2ForSequenceClassification`` (the logits of the last token), input ``input_ids``.

``transformers`` is part of the ``frameworks`` extra; without it these points are skipped with
the reason (:class:`~d5pipe.levels.models.UnsupportedInput`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from d5pipe.levels.models import Adapter, UnsupportedInput
from d5pipe.levels.schema import ZOO_NAMES

__all__ = ["PUBLISHED_PARAMETERS", "ZOO_NAMES", "gpt2", "resnet50", "vit_b16"]


PUBLISHED_PARAMETERS: dict[str, tuple[int, str]] = {
    "resnet50": (25_557_032, "whole network with the 1000-class head (He et al. 2016; torchvision)"),
    "vit_b16": (86_567_656, "whole network at 224x224 with the 1000-class head (Dosovitskiy et al. 2021)"),
    "gpt2": (124_439_808, "the transformer without the head (GPT-2 small, Radford et al. 2019)"),
}
"""Parameter counts the published architectures have, and what they count."""

GPT2_VOCAB = 50257


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise UnsupportedInput("the zoo models need transformers (pip install 'd5pipe[frameworks]')") from exc
    return transformers


def _image_shape(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 3:
        raise UnsupportedInput(f"model {name} needs (C, H, W) images; the dataset gives {shape}")
    c, h, w = shape
    return c, h, w


def resnet50(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """ResNet-50 (bottleneck blocks 3-4-6-3, widths 256-2048)."""
    c, h, w = _image_shape("resnet50", input_shape)
    if min(h, w) < 32:
        raise UnsupportedInput(f"model resnet50 needs images of at least 32x32; got {h}x{w}")
    tf = _transformers()
    config = tf.ResNetConfig(num_channels=c, num_labels=int(n_classes), layer_type="bottleneck",
                             depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], embedding_size=64)
    return Adapter(tf.ResNetForImageClassification(config), input_name="pixel_values", output="logits")


def vit_b16(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """ViT-B/16 (12 layers, width 768, 12 heads, MLP 3072, 16x16 patches)."""
    c, h, w = _image_shape("vit_b16", input_shape)
    if h != w or h % 16:
        raise UnsupportedInput(f"model vit_b16 needs square images whose side is a multiple of 16; got {h}x{w}")
    tf = _transformers()
    config = tf.ViTConfig(image_size=h, patch_size=16, num_channels=c, num_labels=int(n_classes),
                          hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    return Adapter(tf.ViTForImageClassification(config), input_name="pixel_values", output="logits")


def gpt2(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """GPT-2 small (12 layers, width 768, 12 heads, vocabulary 50257, 1024 positions)."""
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 1 or not 1 <= shape[0] <= 1024:
        raise UnsupportedInput(f"model gpt2 needs (T,) token ids with T <= 1024; the dataset gives {shape}")
    tf = _transformers()
    config = tf.GPT2Config(vocab_size=GPT2_VOCAB, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                           num_labels=int(n_classes), pad_token_id=GPT2_VOCAB - 1)
    return Adapter(tf.GPT2ForSequenceClassification(config), input_name="input_ids", output="logits")
