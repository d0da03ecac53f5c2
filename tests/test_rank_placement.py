"""distributed.bind and distributed.buffer: which cores a rank pins itself to, which allocator made a
collective's buffer, and what a collective point records of both (d5pipe.levels.level3.placement)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.levels.level3.outcome import collective_outcome
from d5pipe.levels.level3.placement import allocate, huge_page_bytes, rank_cpus
from d5pipe.levels.level3.point import ranks_share_cpus


def test_each_local_rank_gets_its_own_cores_wrapping_round_the_usable_ones() -> None:
    assert [rank_cpus([0, 1], r, 1) for r in (0, 1)] == [[0], [1]]
    assert [rank_cpus([7, 2, 5, 3], r, 2) for r in (0, 1)] == [[2, 3], [5, 7]]
    assert rank_cpus([0, 1], 2, 1) == [0]  # more ranks than cores wrap (the launch binds no such set)
    with pytest.raises(ValueError):
        rank_cpus([], 0, 1)


def test_binding_pins_every_thread_of_the_process_including_those_started_before() -> None:
    usable = sorted(os.sched_getaffinity(0))
    code = (
        "import os, threading, time, json\n"
        "from d5pipe.levels.level3.placement import bind_from_env\n"
        "t = threading.Thread(target=time.sleep, args=(5,), daemon=True); t.start()\n"
        "done = bind_from_env()\n"
        "print(json.dumps([done, sorted(os.sched_getaffinity(t.native_id))]))\n"
    )
    env = {**os.environ, "D5PIPE_BIND": "core", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMP_NUM_THREADS": "1"}
    env.pop("LOCAL_RANK", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    done, thread_cpus = json.loads(out.stdout.strip().splitlines()[-1])
    expected = rank_cpus(usable, 1, 1)
    assert done == {"bind": "core", "cpus": expected} and thread_cpus == expected


def test_the_peer_buffer_is_allocated_as_each_engines_peers_allocate_theirs() -> None:
    buf, rec = allocate("peer", "mpi", 1024)
    assert rec["allocator"] == "numpy.ones"
    assert rec["bytes"] == 4096 and bool((buf == 1).all())
    assert rec["page_offset"] == buf.data_ptr() % 4096  # where in its page the allocator served it
    for buffer, engine in (("engine", "mpi"), ("peer", "ddp"), ("peer", "horovod"), ("engine", "ddp")):
        assert allocate(buffer, engine, 8)[1]["allocator"] == "torch.ones"
    if sys.platform.startswith("linux"):
        assert isinstance(rec["huge_page_bytes"], int) and rec["huge_page_bytes"] >= 0
        assert huge_page_bytes(buf.data_ptr(), 4096) == rec["huge_page_bytes"]


def _rank(r: int, cpus: list[int], allocator: str) -> dict[str, object]:
    return {"rank": r, "hostname": "h", "cpus": cpus, "times_s": [1e-3, 2e-3], "correct": True,
            "allocation": {"buffer": "peer", "allocator": allocator, "bytes": 4096, "huge_page_bytes": 2 * r}}


def test_a_collective_point_records_its_buffer_and_the_placement_of_its_ranks() -> None:
    ranks = [_rank(0, [0], "numpy.ones"), _rank(1, [1], "numpy.ones")]
    assert not ranks_share_cpus(ranks) and ranks_share_cpus([_rank(0, [0, 1], "x"), _rank(1, [1], "x")])
    launch = {"oversubscribed": False, "threads_per_rank": 1, "binding": "core", "ranks_share_cpus": False,
              "hosts": ["h"], "ranks_per_host": {"h": 2}}
    out: PointOutcome = collective_outcome({"ranks": 2, "collective": "allreduce", "message_bytes": 4096},
                                           ranks, launch)
    got = {m.name: m for m in out.metrics}

    def value(name: str) -> object:
        metric: Metric = got[name]
        return metric.value

    assert (value("buffer"), value("buffer_allocator"), value("buffer_huge_page_bytes")) == ("peer", "numpy.ones", 0)
    assert value("bind") == "core" and value("ranks_share_cpus") is False
    unbound = collective_outcome({"ranks": 2, "collective": "allreduce", "message_bytes": 4096}, ranks,
                                 {**launch, "binding": "none (oversubscribed: 4 ranks x 1 threads on 2 cores)"})
    assert next(m.value for m in unbound.metrics if m.name == "bind") == "none"


@pytest.mark.parametrize("asked", [True, False])
def test_gloos_polling_thread_is_lowered_only_where_the_launch_asked(asked: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real gloo process group (one rank): its TCP loop thread goes to nice 19 with
    D5PIPE_LOWER_POLLERS=1, and stays at the process's priority without; the rank's own thread never moves."""
    code = (
        "import json, os, torch.distributed as dist\n"
        "from d5pipe.levels.level3.placement import lower_pollers\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/rdv', rank=0, world_size=1)\n"
        "found = lower_pollers('ddp')\n"
        "print(json.dumps([found, os.getpriority(os.PRIO_PROCESS, 0)]))\n"
        "dist.destroy_process_group()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "D5PIPE_LOWER_POLLERS"}
    if asked:
        env["D5PIPE_LOWER_POLLERS"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    found, own = json.loads(out.stdout.strip().splitlines()[-1])
    assert own == os.getpriority(os.PRIO_PROCESS, 0)
    assert found == [{"name": "gloo_tcp_loop", "nice": 19 if asked else own}]
