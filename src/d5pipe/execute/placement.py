"""Node placement: running the same point on each of N distinct nodes (``placement.node``).

On shared clusters the variation *between* nodes often dominates the CI *within* one. With the
axis ``placement.node: [1, 2, 3]`` every point of a stage exists three times (the node index is
part of the point's ID); the planner keeps the points of one node in their own shards
(d5pipe.plan.build.node_groups) and here each shard's SLURM job is pinned to the k-th distinct
node of its partition with ``--nodelist`` (the plugin's ``slurm_extra``). Such stages are not
submitted as job arrays: an array shares one set of sbatch options.

The nodes are ``sinfo -h -N -o %N`` of the stage's partition, responding ones only (not down,
drained or failing), in natural name order (node2 before node10), read once per driver. A node
index beyond them stops ``d5pipe run`` before any job with one line. A local run has one node:
points with ``placement.node`` >= 2 are skipped there with the reason.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from natsort import natsorted

from d5pipe.core.errors import D5PipeError
from d5pipe.core.toolchain import run_tool
from d5pipe.levels.registry import NODE_AXIS

_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_UNUSABLE = ("down", "drain", "fail", "maint", "unk", "no_respond", "power")


def node_of(config: Mapping[str, Any]) -> int:
    """The ``placement.node`` of a resolved point config (the schema's default without a placement)."""
    from d5pipe.config.schema import PlacementConf  # the schema only where a node is asked for
    from d5pipe.core.fields import setting

    return int(setting(config.get("placement"), PlacementConf, "node"))


@lru_cache(maxsize=8)
def partition_nodes(partition: str = "") -> tuple[str, ...]:
    """The responding nodes of ``partition`` (the default partition when empty), natural order."""
    try:
        proc = run_tool(["sinfo", "-h", "-N", "-o", "%N %t"] + (["-p", partition] if partition else []), 60)
        if proc is not None:
            proc.check_returncode()
    except (OSError, subprocess.SubprocessError) as exc:
        raise D5PipeError(f"placement.node: listing the nodes with sinfo failed ({exc})") from None
    if proc is None:
        raise D5PipeError("placement.node: sinfo is not on PATH, so the partition's nodes cannot be listed")
    rows = [line.split() for line in proc.stdout.splitlines()]
    return tuple(natsorted({parts[0] for parts in rows if len(parts) == 2 and _NODE_NAME.match(parts[0])
                            and not parts[1].lower().startswith(_UNUSABLE)}))


def node_name(index: int, partition: str = "") -> str:
    """The ``index``-th (1-based) node of the partition; a one-line error beyond them."""
    nodes = partition_nodes(partition)
    if not 1 <= index <= len(nodes):
        where = f"partition {partition!r}" if partition else "the default partition"
        raise D5PipeError(f"placement.node: {index} is beyond the {len(nodes)} responding node(s) of {where} "
                          f"({', '.join(nodes) or 'none'})")
    return nodes[index - 1]


def nodelist_option(index: int, partition: str = "") -> str:
    """``slurm_extra`` of a shard on node ``index`` (empty for 0: the scheduler chooses)."""
    return f"--nodelist={node_name(index, partition)}" if index > 0 else ""


def placed_stages(plan: Any) -> set[str]:
    """Stages of a plan (d5pipe.plan.build.Plan) whose points are pinned to nodes."""
    return {stage for stage, sp in plan.stages.items() if NODE_AXIS in sp.axes or node_of(plan.config) > 0}


def check_nodes(plan: Any) -> None:
    """Under SLURM: every node index the plan uses exists (before any job is submitted)."""
    from d5pipe.core.stage_resources import merged_resources

    executor = plan.config.get("executor") or {}
    for stage in sorted(placed_stages(plan)):
        sp = plan.stages[stage]
        indices = ({int(p[sp.axes.index(NODE_AXIS)]) for p in sp.params} if NODE_AXIS in sp.axes
                   else {node_of(plan.config)})
        partition = str(merged_resources(executor, stage).get("partition") or "")
        for index in sorted(i for i in indices if i > 0):
            node_name(index, partition)


def skip_reason(config: Mapping[str, Any], executor: Mapping[str, Any]) -> str | None:
    """Why a point cannot run where it is (a local run has one node), or None."""
    node = node_of(config)
    if node >= 2 and executor.get("name") != "slurm":
        return f"placement.node={node} needs the slurm executor (a local run has one node)"
    return None
