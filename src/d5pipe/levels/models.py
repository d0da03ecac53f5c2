"""Models for levels 1-3, sized from the ``model`` config section.

Every model is a target (d5pipe.levels.targets): the built-ins below are registered as
``d5pipe.levels.models.mlp`` / ``cnn`` / ``transformer`` with their arguments from the section, a
user model is any ``torch.nn.Module`` factory in ``model.custom``; :func:`build_model` builds
either with ``input_shape`` (one sample, no batch dimension) and ``n_classes``. A model that
cannot take an input shape raises :class:`UnsupportedInput` (the point is skipped).

* ``mlp``: flatten, ``hidden`` Linear+ReLU(+Dropout) layers, linear head; any input shape.
* ``cnn``: 3x3 conv stem, ``blocks`` residual blocks (conv-BN-ReLU-conv-BN + identity) at
  ``channels`` channels, global average pooling, linear head; needs (C, H, W) input.
* ``resnet``: He et al.'s ResNet of ``depth`` 18-152 in torchvision's layout (ResNet-50: 25.6 M
  parameters at 1000 classes), plain torch modules that other training frameworks build too.
* ``transformer``: pre-norm encoder of ``layers`` layers. Images: each row is a token (its C*W
  values embedded linearly); vectors: each feature is a token (its scalar embedded linearly).
  Learned positional embeddings, mean pooling, linear head.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import conf_from_dict
from d5pipe.levels.contract import PointSkipped
from d5pipe.levels.instantiate import build
from d5pipe.levels.schema import (
    ADAPTER_KEYS,
    FLOAT_INPUT_MODELS,
    MODEL_NAMES,
    TOKEN_INPUT_MODELS,
    ModelConf,
)
from d5pipe.levels.targets import target_of

__all__ = ["MODEL_NAMES", "Adapter", "UnsupportedInput", "build_model", "cnn", "count_parameters", "mlp", "resnet",
           "transformer"]


class UnsupportedInput(D5PipeError, PointSkipped):
    """The model cannot take this dataset's input shape: the point is skipped with the reason."""


def check_input_kind(model_name: str, integer_input: bool) -> None:
    """A built-in model and the kind of its input agree: token ids for ``gpt2``, float features for
    the others (:class:`UnsupportedInput` otherwise; a user model is not judged)."""
    if integer_input and model_name in FLOAT_INPUT_MODELS:
        raise UnsupportedInput(f"model {model_name} takes float features; the dataset gives integer token ids "
                               "(use a model that embeds token ids, e.g. gpt2)")
    if not integer_input and model_name in TOKEN_INPUT_MODELS:
        raise UnsupportedInput(f"model {model_name} takes integer token ids; the dataset gives float features "
                               "(use dataset synthetic_tokens)")


def logits_of(out: Any, field_name: str, where: str) -> torch.Tensor:
    """The logits in a model's output: the tensor itself, else ``field_name`` (or ``logits``) as an
    attribute of an output object or a key of a mapping."""
    if isinstance(out, torch.Tensor) and not field_name:
        return out
    name = field_name or "logits"
    value = out.get(name) if isinstance(out, dict) else getattr(out, name, None)
    if value is None and hasattr(out, "__getitem__") and not isinstance(out, (torch.Tensor, dict)):
        try:
            value = out[name]
        except (KeyError, TypeError, IndexError):
            value = None
    if not isinstance(value, torch.Tensor):
        raise D5PipeError(f"{where}: the model returned a {type(out).__name__} without a tensor "
                          f"{name!r}; declare the field that holds its logits in _output_")
    return value


class Adapter(nn.Module):
    """A library model behind d5pipe's interface, ``forward(x) -> logits``: the batch goes to the
    keyword ``input_name`` (positionally when empty), the logits come from the output field
    ``output`` (d5pipe.levels.zoo declares these for its models; a user entry with ``_input_`` /
    ``_output_``). Its parameters are the wrapped model's."""

    def __init__(self, model: nn.Module, input_name: str = "", output: str = "", where: str = "model") -> None:
        super().__init__()
        self.model = model
        self.input_name = input_name
        self.output = output
        self.where = where

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(**{self.input_name: x}) if self.input_name else self.model(x)
        return logits_of(out, self.output, self.where)


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: list[int], n_classes: int, dropout: float) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def norm_layer(kind: str, channels: int) -> nn.Module:
    """``batch``: BatchNorm2d; ``group``: GroupNorm with one group (per-sample statistics)."""
    return nn.GroupNorm(1, channels) if kind == "group" else nn.BatchNorm2d(channels)


class ResidualBlock(nn.Module):
    def __init__(self, channels: int, norm: str = "batch") -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = norm_layer(norm, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = norm_layer(norm, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


class GlobalAvgPool(nn.Module):
    """Mean over H and W. (AdaptiveAvgPool2d's CUDA backward has no deterministic kernel, so
    ``torch.use_deterministic_algorithms(True)`` would reject it; ``mean`` is deterministic.)"""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class ResNetSmall(nn.Module):
    def __init__(self, in_channels: int, channels: int, blocks: int, n_classes: int, dropout: float,
                 norm: str = "batch") -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False),
            norm_layer(norm, channels),
            nn.ReLU(),
        )
        self.blocks = nn.Sequential(*(ResidualBlock(channels, norm) for _ in range(blocks)))
        self.head = nn.Sequential(
            GlobalAvgPool(),
            nn.Dropout(dropout) if dropout > 0 else nn.Identity(),
            nn.Linear(channels, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.blocks(self.stem(x)))
        return out


class TransformerClassifier(nn.Module):
    def __init__(self, input_shape: tuple[int, ...], conf: ModelConf, n_classes: int) -> None:
        """``conf`` supplies ``d_model``, ``heads``, ``layers``, ``ff_mult`` and ``dropout``."""
        super().__init__()
        if len(input_shape) == 3:
            c, h, w = input_shape
            self.n_tokens, token_dim = h, c * w
        else:
            self.n_tokens, token_dim = math.prod(input_shape), 1
        self.token_dim = token_dim
        self.embed = nn.Linear(token_dim, conf.d_model)
        self.pos = nn.Parameter(torch.zeros(1, self.n_tokens, conf.d_model))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(
            conf.d_model,
            conf.heads,
            dim_feedforward=conf.ff_mult * conf.d_model,
            dropout=conf.dropout,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, conf.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(conf.d_model)
        self.head = nn.Linear(conf.d_model, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:  # (B, C, H, W) -> (B, H, C*W): rows are tokens
            tokens = x.permute(0, 2, 1, 3).reshape(x.shape[0], self.n_tokens, self.token_dim)
        else:
            tokens = x.reshape(x.shape[0], self.n_tokens, 1)
        z = self.encoder(self.embed(tokens) + self.pos)
        out: torch.Tensor = self.head(self.norm(z).mean(dim=1))
        return out


def mlp(input_shape: tuple[int, ...], n_classes: int, hidden: list[int], dropout: float = 0.0) -> nn.Module:
    """The built-in ``mlp``: any input shape (flattened)."""
    if any(h < 1 for h in hidden):
        raise D5PipeError(f"model.hidden: widths must be >= 1, got {list(hidden)}")
    return MLP(math.prod(int(d) for d in input_shape), list(hidden), n_classes, dropout)


def cnn(input_shape: tuple[int, ...], n_classes: int, channels: int, blocks: int, dropout: float = 0.0,
        norm: str = "batch") -> nn.Module:
    """The built-in ``cnn``: needs (C, H, W) input; ``norm`` (ModelConf.norm): BatchNorm or GroupNorm."""
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 3:
        raise UnsupportedInput(f"model cnn needs (C, H, W) input; the dataset gives {shape}")
    if channels < 1 or blocks < 0:
        raise D5PipeError(f"model: cnn needs channels >= 1, blocks >= 0, got {channels}, {blocks}")
    return ResNetSmall(shape[0], channels, blocks, n_classes, dropout, norm)


def transformer(input_shape: tuple[int, ...], n_classes: int, d_model: int, heads: int, layers: int,
                ff_mult: int, dropout: float = 0.0) -> nn.Module:
    """The built-in ``transformer``: (F,) or (C, H, W) input."""
    shape = tuple(int(d) for d in input_shape)
    if heads < 1 or d_model % heads != 0:
        raise D5PipeError(f"model: transformer d_model ({d_model}) must be a multiple of heads ({heads})")
    if len(shape) not in (1, 3):
        raise UnsupportedInput(f"model transformer needs (F,) or (C, H, W) input; got {shape}")
    conf = ModelConf(name="transformer", d_model=d_model, heads=heads, layers=layers, ff_mult=ff_mult,
                     dropout=dropout)
    return TransformerClassifier(shape, conf, n_classes)


def build_model(model_cfg: dict[str, Any], input_shape: tuple[int, ...], n_classes: int,
                name: str | None = None) -> nn.Module:
    """The model ``model.name`` selects (or ``name``: e.g. ``model.reference``) for samples of
    ``input_shape`` (no batch dim); built-in or user target, one path (d5pipe.levels.instantiate).

    Parameters are initialised from torch's global RNG: seed it first (d5pipe.measure.determinism).
    """
    conf = conf_from_dict(ModelConf, "model", model_cfg)
    shape = tuple(int(d) for d in input_shape)
    if n_classes < 2:
        raise D5PipeError(f"model: n_classes must be >= 2, got {n_classes}")
    key, target = target_of(dataclasses.asdict(conf), "model", name)
    target = dict(target)
    adapter = {k: target.pop(k) for k in ADAPTER_KEYS if k in target}
    for k, v in adapter.items():
        if not isinstance(v, str) or not v.isidentifier():
            raise D5PipeError(f"{key}.{k}: {v!r} is not a keyword / field name")
    model = build(target, key, offered={"input_shape": shape, "n_classes": int(n_classes)})
    if not isinstance(model, nn.Module):
        raise D5PipeError(f"{key}: built a {type(model).__name__}, not a torch.nn.Module")
    if adapter:
        model = Adapter(model, adapter.get("_input_", ""), adapter.get("_output_", ""), key)
    return model


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class Bottleneck(nn.Module):
    """1x1, 3x3 (strided, ResNet v1.5), 1x1 x4 convolutions, each with BatchNorm, plus the shortcut."""

    expansion = 4

    def __init__(self, inp: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(inp, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU()
        self.downsample = (nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                           if stride != 1 or inp != out else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + self.downsample(x))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm, plus the shortcut."""

    expansion = 1

    def __init__(self, inp: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(inp, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.downsample = (nn.Sequential(nn.Conv2d(inp, width, 1, stride, bias=False), nn.BatchNorm2d(width))
                           if stride != 1 or inp != width else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + self.downsample(x))


RESNET_LAYERS: dict[int, tuple[type[nn.Module], tuple[int, ...]]] = {
    18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)), 50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)), 152: (Bottleneck, (3, 8, 36, 3)),
}


def resnet(input_shape: tuple[int, ...], n_classes: int, depth: int = 50) -> nn.Module:
    """The built-in ``resnet``: torchvision's ResNet layout in plain torch modules (a 7x7/2 stem and a
    3x3/2 max pool, four stages at widths 64-512, global average pooling, a linear head); every
    layer is one another framework builds (d5pipe.levels.level2.frameworks). Needs (C, H, W) input."""
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 3:
        raise UnsupportedInput(f"model resnet needs (C, H, W) input; the dataset gives {shape}")
    block, counts = RESNET_LAYERS[depth]
    layers: list[nn.Module] = [nn.Conv2d(shape[0], 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                               nn.MaxPool2d(3, 2, 1)]
    inp = 64
    for i, n in enumerate(counts):
        width = 64 * 2 ** i
        for j in range(n):
            layers.append(block(inp, width, 2 if i > 0 and j == 0 else 1))
            inp = width * block.expansion  # type: ignore[attr-defined]
    return nn.Sequential(*layers, GlobalAvgPool(), nn.Linear(inp, n_classes))
