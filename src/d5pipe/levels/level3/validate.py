"""Level 3 checks before any job (torch-free): batch split, launcher/backend pairs, device."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import default_of, setting
from d5pipe.levels.config_checks import check_device_name, check_memory_storage, section
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.level3.early_stop import check as check_early_stop
from d5pipe.levels.level3.schema import DistributedConf
from d5pipe.levels.schema import check_dataset, check_model
from d5pipe.levels.targets import check_slots
from d5pipe.levels.targets import used_targets as _used

SLOTS: tuple[str, ...] = ("model", "dataset", "optimizer", "strategy")
"""The plug-in slots a level-3 point uses (d5pipe.levels.targets.SLOTS)."""
PARAMETER_SERVERS: tuple[str, ...] = ("ps_sync", "ps_async")
"""The built-in strategies with one server rank (d5pipe.levels.level3.parameter_server)."""
LEVEL2_ONLY_KEYS: tuple[str, ...] = ("sampler", "augment")
"""``train`` keys that change what a level-2 run computes and that level 3, which draws its global
batches itself (d5pipe.levels.level3.training), would ignore. (The DataLoader's settings change only
how fast batches come, and level 3 has no DataLoader: they are not refused.)"""


def check_distributed(dist: Mapping[str, Any]) -> None:
    """Cross-field checks of a resolved ``distributed`` section."""
    ranks = setting(dist, DistributedConf, "ranks")
    nodes = setting(dist, DistributedConf, "nodes")
    if isinstance(ranks, int) and isinstance(nodes, int) and nodes > 1 and (nodes > ranks or ranks % nodes):
        raise D5PipeError(f"config error: key 'distributed.nodes': {nodes} nodes cannot share "
                          f"distributed.ranks={ranks} evenly (ranks per node = ranks / nodes)")
    if (setting(dist, DistributedConf, "benchmark") == "train" and setting(dist, DistributedConf, "scaling") == "strong"
            and isinstance(ranks, int) and ranks > 0):
        global_batch = setting(dist, DistributedConf, "global_batch")
        if isinstance(global_batch, int) and global_batch % ranks:
            raise D5PipeError(f"config error: key 'distributed.global_batch': {global_batch} is not "
                              f"divisible by distributed.ranks={ranks} (strong scaling)")
    if setting(dist, DistributedConf, "strategy") in PARAMETER_SERVERS and isinstance(ranks, int) and ranks > 1:
        scaling = setting(dist, DistributedConf, "scaling")
        size = "global_batch" if scaling == "strong" else "per_rank_batch"
        batch = setting(dist, DistributedConf, size)
        total = batch if scaling == "strong" else batch * ranks
        if isinstance(total, int) and total % (ranks - 1):
            raise D5PipeError(f"config error: key 'distributed.{size}': a global batch of {total} does not split "
                              f"over the {ranks - 1} workers of distributed.strategy={dist.get('strategy')} "
                              f"(distributed.ranks={ranks}, one of them the server)")
    if dist.get("launcher") == "torchrun" and setting(dist, DistributedConf, "backend") != "ddp":
        raise D5PipeError(f"config error: key 'distributed.launcher': torchrun cannot start backend "
                          f"{dist.get('backend')!r} (it needs MPI ranks); use mpirun, srun or auto")
    buffer = setting(dist, DistributedConf, "buffer")
    if buffer != "engine" and setting(dist, DistributedConf, "benchmark") != "collective":
        raise D5PipeError(f"config error: key 'distributed.buffer': {buffer!r} is read by collective points only "
                          "(training hands the engine its gradients); leave it at 'engine' for "
                          "distributed.benchmark=train")
    target = dist.get("target_loss")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float)) or target <= 0):
        raise D5PipeError(f"config error: key 'distributed.target_loss': {target!r} must be a loss above 0 (or null)")
    check_early_stop(dict(dist))
    device = dist.get("device")
    if device is not None:
        check_device_name(device, "distributed.device")


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-3 point's resolved config (``model``, ``dataset``, ``train``, ``distributed``)."""
    check_slots(cfg, SLOTS)
    check_model(section(cfg, "model"))
    check_dataset(section(cfg, "dataset"))
    check_memory_storage(cfg, "level 3")
    check_device_name(setting(section(cfg, "train"), TrainConf, "device"), "train.device")
    train = section(cfg, "train")
    micro = setting(train, TrainConf, "micro_batches")
    if micro != 1:
        raise D5PipeError(f"train.micro_batches: {micro} -- level 3 does not split batches into micro-batches "
                          "(levels 1 and 2 do); leave it at 1 for level-3 stages")
    for key in LEVEL2_ONLY_KEYS:  # level 3 draws its own global batches (d5pipe.levels.level3.training)
        value = setting(train, TrainConf, key)
        if value != default_of(TrainConf, key):
            raise D5PipeError(f"train.{key}: {value!r} -- level 3 draws its global batches itself and does not "
                              "read it (level 2 does); leave it at its default for level-3 stages")
    check_distributed(section(cfg, "distributed"))


used_targets = partial(_used, slots=SLOTS)
"""``(key, dotted path)`` of the user targets a level3 point uses (its code hash covers them)."""
check_targets = partial(check_slots, slots=SLOTS)
"""The plug-in registries and selectors against the runner's allow-list; nothing imported."""
