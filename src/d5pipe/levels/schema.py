"""Schema of the ``model`` and ``dataset`` sections, shared by levels 1-3. Torch-free.

Stage code receives sections as plain dicts; d5pipe.core.fields.conf_from_dict turns one into its
dataclass, filling defaults and rejecting unknown keys with a one-line :class:`D5PipeError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import at_least, between, items_at_least, later, setting
from d5pipe.levels.declare import Builtin, declared

ZOO_NAMES: tuple[str, ...] = ("resnet50", "vit_b16", "gpt2")
"""Real networks by name (d5pipe.levels.zoo; ``transformers`` builds them, seeded, no download)."""
MODEL_NAMES: tuple[str, ...] = ("mlp", "cnn", "transformer", "resnet", *ZOO_NAMES)
TOKEN_INPUT_MODELS: tuple[str, ...] = ("gpt2",)
"""Built-in models that take integer token ids (an embedding first); the others take float features."""
FLOAT_INPUT_MODELS: tuple[str, ...] = tuple(n for n in MODEL_NAMES if n not in TOKEN_INPUT_MODELS)
"""Built-in models whose first layer is linear or convolutional on float features."""
ADAPTER_KEYS: tuple[str, ...] = ("_input_", "_output_")
"""Keys of a ``model.custom`` entry that declare its adapter (d5pipe.levels.models.Adapter), not
arguments of its factory: the keyword the input goes to, the output field holding the logits."""
STORAGES: tuple[str, ...] = ("memory", "npy", "png", "lazy")
PIXELS: tuple[str, ...] = ("float32", "uint8")
PNG_CHANNELS: tuple[int, ...] = (1, 3)
"""Image channels a PNG of d5pipe holds (grey, RGB)."""
DATASET_NAMES: tuple[str, ...] = ("digits", "breast_cancer", "wine", "synthetic", "synthetic_images",
                                  "synthetic_tokens")
DTYPES: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16")


@dataclass
class ModelConf:
    name: str = "mlp"
    """``mlp``, ``cnn`` (residual blocks, needs (C,H,W) input), ``transformer``, ``resnet`` (He et
    al.'s ResNet of ``depth`` layers in plain torch modules, torchvision's layout), a real network
    built by a library (``resnet50``, ``vit_b16``, ``gpt2``: d5pipe.levels.zoo) or a key of ``custom``."""
    custom: dict[str, Any] = field(default_factory=dict)
    """User models: name -> target (``{_target_: mypkg.models.MyNet, width: 64}``); built with
    ``input_shape`` and ``n_classes`` where the factory takes them. A library model declares its
    adapter in the entry: ``_input_`` (the keyword its input goes to, e.g. ``pixel_values``) and
    ``_output_`` (the field of its output that holds the logits, e.g. ``logits``) (docs/plugins.md)."""
    reference: str = ""
    """Level 1: the model (built-in or custom) this one re-implements; its float64 eager outputs,
    with the same weights, are the reference of ``output_check``. Empty: the model itself."""
    hidden: list[int] = items_at_least([64], 1)
    """MLP hidden layer widths."""
    channels: int = at_least(16, 1)
    """CNN channels of every residual block."""
    blocks: int = at_least(2, 0)
    """CNN residual blocks."""
    norm: str = later("batch", choices=("batch", "group"))
    """CNN normalisation: ``batch`` (BatchNorm: statistics over the batch, which couples its samples,
    so micro-batches compute something else) or ``group`` (GroupNorm with one group: statistics per
    sample, so a batch's gradient is the sum of its micro-batches')."""
    depth: int = later(50, choices=(18, 34, 50, 101, 152))
    """ResNet depth: 18 and 34 with basic blocks, 50, 101, 152 with bottlenecks."""
    d_model: int = at_least(64, 1)
    """Transformer embedding width (a multiple of ``heads``)."""
    heads: int = at_least(4, 1)
    """Transformer attention heads (they divide ``d_model``)."""
    layers: int = at_least(2, 1)
    """Transformer encoder layers."""
    ff_mult: int = at_least(2, 1)
    """Transformer feed-forward width = ``ff_mult * d_model``."""
    dropout: float = at_least(0.0, 0.0)
    """Below 1."""


@dataclass
class DatasetConf:
    name: str = "digits"
    """``digits``, ``breast_cancer``, ``wine`` (bundled with scikit-learn), ``synthetic``,
    ``synthetic_images``, ``synthetic_tokens`` or a key of ``custom``. ``synthetic`` is materialised
    once; the other two are generated per sample from ``generator_seed`` and the index, on demand
    (any ``n_samples``: nothing of that size is allocated; d5pipe.levels.lazy_samples)."""
    custom: dict[str, Any] = field(default_factory=dict)
    """User datasets: name -> target returning the train/test split (docs/plugins.md)."""
    n_samples: int = at_least(2048, 4)
    """synthetic* only."""
    n_features: int = at_least(64, 1)
    """synthetic only, when ``image_shape`` is empty."""
    n_classes: int = at_least(10, 2)
    """synthetic* only (the real datasets have their own)."""
    image_shape: list[int] = items_at_least([], 1)
    """synthetic: ``[C, H, W]`` makes image samples; empty makes flat vectors. synthetic_images:
    required, ``[C, H, W]`` (e.g. ``[3, 224, 224]``)."""
    noise: float = at_least(1.0, 0.0)
    """synthetic, synthetic_images: standard deviation of the noise around each class prototype."""
    generator_seed: int = 0
    """synthetic* only: seeds the class prototypes and samples."""
    seq_len: int = at_least(128, 1)
    """synthetic_tokens only: tokens per sample."""
    vocab_size: int = at_least(50257, 2)
    """synthetic_tokens only: token ids are in ``[0, vocab_size)``."""
    test_fraction: float = between(0.25, 0.0, 1.0)
    """synthetic_images/_tokens: the last ``round(test_fraction * n_samples)`` indices are the test
    split (at least one sample each)."""
    split_seed: int = 0
    """Seeds the stratified train/test split (not used by synthetic_images/_tokens)."""
    storage: str = later("memory", choices=STORAGES)
    """Level 2: how the training split is stored and read: ``memory`` (held in memory, or generated
    per batch for synthetic_images/_tokens), ``npy`` (one NumPy file, each sample read through a
    memory map) or ``png`` (one PNG file a sample, decoded per sample; 8-bit pixels: digits, or
    ``pixels: uint8``). ``npy`` and ``png`` are written once by the prepare_data job and read by a
    DataLoader over one sample at a time (d5pipe.levels.stored_samples); every storage of a
    dataset holds the same values. ``lazy``: a user's dataset whose factory returns ``(train,
    test)`` torch Datasets is never stacked; each sample is read through its ``__getitem__``
    (d5pipe.levels.user_samples)."""
    pixels: str = later("float32", choices=PIXELS)
    """synthetic (with ``image_shape``) and synthetic_images: ``uint8`` rounds every value to one of
    256 levels, ``(q - 128) / 32`` for ``q`` in 0..255, so that the images are 8-bit pixels (what
    ``storage: png`` needs); ``float32`` keeps them unrounded."""


ZOO_PACKAGE = "transformers"
"""The library the zoo's networks are built with (d5pipe.levels.zoo)."""

_MODEL_ARGS: dict[str, tuple[str, ...]] = {
    "mlp": ("hidden", "dropout"), "cnn": ("channels", "blocks", "dropout", "norm"),
    "transformer": ("d_model", "heads", "layers", "ff_mult", "dropout"), "resnet": ("depth",),
}
MODELS: dict[str, Builtin] = declared(
    *(Builtin(n, f"d5pipe.levels.models.{n}", args=a) for n, a in _MODEL_ARGS.items()),
    *(Builtin(n, f"d5pipe.levels.zoo.{n}", packages=(ZOO_PACKAGE,)) for n in ZOO_NAMES))
"""The built-in models of ``model.name`` (called with ``input_shape, n_classes``)."""
_DATASET_ARGS = tuple(f.name for f in fields(DatasetConf) if f.name != "custom")
DATASETS: dict[str, Builtin] = declared(
    *(Builtin(n, "d5pipe.levels.builtin_datasets.builtin_arrays", args=_DATASET_ARGS) for n in DATASET_NAMES))
"""The built-in datasets of ``dataset.name``: one factory taking the whole section."""


def model_requires(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(setting, package)`` a point's model needs installed: the zoo's library for a zoo model."""
    name = str(setting(cfg.get("model"), ModelConf, "name") or "")
    return [(f"model.name={name}", p) for p in MODELS[name].packages] if name in MODELS else []


def check_model(model: Mapping[str, Any], where: str = "model") -> None:
    """Cross-field checks of a resolved ``model`` section (user models: d5pipe.levels.targets)."""
    dropout = setting(model, ModelConf, "dropout")
    if isinstance(dropout, (int, float)) and dropout >= 1.0:
        raise D5PipeError(f"{where}.dropout: {dropout} must be below 1")
    if model.get("name") == "transformer":
        d_model, heads = model.get("d_model"), model.get("heads")
        if isinstance(d_model, int) and isinstance(heads, int) and heads > 0 and d_model % heads:
            raise D5PipeError(f"{where}.d_model: {d_model} is not a multiple of {where}.heads={heads}")
    custom = model.get("custom") or {}
    for name, entry in (custom.items() if isinstance(custom, Mapping) else ()):
        for key in ADAPTER_KEYS:
            value = entry.get(key) if isinstance(entry, Mapping) else None
            if value is not None and not (isinstance(value, str) and value.isidentifier()):
                raise D5PipeError(f"{where}.custom.{name}.{key}: {value!r} is not a keyword / field name")


def check_dataset(dataset: Mapping[str, Any], where: str = "dataset") -> None:
    """Cross-field checks of a resolved ``dataset`` section."""
    shape = dataset.get("image_shape") or []
    if dataset.get("name") == "synthetic_images" and len(shape) != 3:
        raise D5PipeError(f"{where}.image_shape: {list(shape)}; synthetic_images needs [C, H, W]")
    if len(shape) not in (0, 3):
        raise D5PipeError(f"{where}.image_shape: {list(shape)} must be empty or [C, H, W]")
    _check_storage(dataset, where)
    if dataset.get("name") == "synthetic":
        n, classes = setting(dataset, DatasetConf, "n_samples"), setting(dataset, DatasetConf, "n_classes")
        if isinstance(n, int) and isinstance(classes, int) and n < 2 * classes:
            raise D5PipeError(f"{where}.n_samples: synthetic needs n_samples >= 2 x n_classes, "
                              f"got n_samples={n}, n_classes={classes}")


def _check_storage(dataset: Mapping[str, Any], where: str) -> None:
    """``pixels`` only where there are synthetic images; ``png`` only for 8-bit images."""
    name, shape = dataset.get("name"), list(dataset.get("image_shape") or [])
    pixels, storage = setting(dataset, DatasetConf, "pixels"), setting(dataset, DatasetConf, "storage")
    synthetic_images = name == "synthetic_images" or (name == "synthetic" and len(shape) == 3)
    if pixels != "float32" and not synthetic_images:
        raise D5PipeError(f"{where}.pixels: {pixels!r} -- only synthetic images (synthetic with image_shape, "
                          "synthetic_images) are rounded to pixels")
    if storage == "lazy" and name in DATASET_NAMES:
        raise D5PipeError(f"{where}.storage: lazy keeps a user's torch Datasets unstacked (dataset.custom); "
                          f"{name} is built in: use memory, npy or png")
    if storage != "png" or name not in DATASET_NAMES or name == "digits":  # a user's: checked when prepared
        return
    if not synthetic_images or pixels != "uint8":
        raise D5PipeError(f"{where}.storage: png holds 8-bit images: digits, or synthetic images with "
                          f"{where}.pixels: uint8 (got {name}{' pixels ' + str(pixels) if synthetic_images else ''})")
    if shape[0] not in PNG_CHANNELS:
        raise D5PipeError(f"{where}.storage: png holds {' or '.join(map(str, PNG_CHANNELS))} channels, "
                          f"{where}.image_shape has {shape[0]}")
