"""d5pipe's timer vs torch.utils.benchmark on the same inputs, side by side in one process.

For a CPU matmul of about 1 ms and an elementwise add of about 10 us (sizes picked by a short
probe on this machine), alternate rounds of ``d5pipe.measure.timer.measure`` and
``torch.utils.benchmark.Timer.blocked_autorange`` and print each round's medians and the ratio of
the medians over rounds (d5pipe / torch), plus the median of the paired per-round ratios with its
95% confidence interval (order statistics). A ratio near 1 means d5pipe's blocks, synchronisation and
stop rule add no measurable bias; a noisy shared machine widens the spread of the rounds.

Usage: python benchmarks/bench_timer_overhead.py [--rounds 9] [--threads N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils import benchmark

from d5pipe.measure.stats import median_ci
from d5pipe.measure.timer import measure

D5_TIMER = {"warmup_s": 0.05, "min_block_s": 0.01, "budget_s": 0.5, "target_ci_pct": 1.0}
TORCH_MIN_RUN_TIME = 0.5


def _sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def one_call_s(fn: Callable[[], object], calls: int = 20) -> float:
    fn()
    _sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync()
    return (time.perf_counter() - start) / calls


def pick(make: Callable[[int], Callable[[], object]], sizes: list[int], target_s: float) -> tuple[int, Callable[[], object]]:
    """The size whose single call is closest to ``target_s`` (on a log scale)."""
    best: tuple[float, int, Callable[[], object]] | None = None
    for n in sizes:
        fn = make(n)
        t = one_call_s(fn)
        score = abs(torch.log(torch.tensor(t / target_s)).item())
        if best is None or score < best[0]:
            best = (score, n, fn)
    assert best is not None
    return best[1], best[2]


DEVICE = "cpu"


def make_matmul(n: int) -> Callable[[], object]:
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(DEVICE) for _ in range(2))
    return lambda: torch.matmul(a, b)


def make_add(n: int) -> Callable[[], object]:
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randn(n, generator=gen).to(DEVICE) for _ in range(2))
    return lambda: torch.add(x, y)


def compare(label: str, fn: Callable[[], object], rounds: int, threads: int) -> float:
    d5: list[float] = []
    tu: list[float] = []
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    for r in range(rounds):
        m = measure(fn, D5_TIMER, DEVICE)
        d5.append(m.summary.median)
        tu.append(timer.blocked_autorange(min_run_time=TORCH_MIN_RUN_TIME).median)
        print(f"  {label} round {r}: d5pipe {d5[-1] * 1e6:9.2f} us "
              f"(n={len(m.samples)}, reps={m.calls_per_block}, target_met={m.target_met})  "
              f"torch {tu[-1] * 1e6:9.2f} us  ratio {d5[-1] / tu[-1]:.3f}")
    ratio = statistics.median(d5) / statistics.median(tu)
    spread = [a / b for a, b in zip(d5, tu, strict=True)]
    ci = median_ci(spread)
    print(f"{label}: median over rounds d5pipe {statistics.median(d5) * 1e6:.2f} us, "
          f"torch {statistics.median(tu) * 1e6:.2f} us, ratio of medians {ratio:.3f}; "
          f"median per-round ratio {statistics.median(spread):.3f} "
          f"(95% CI {ci.low:.3f}..{ci.high:.3f}; range {min(spread):.3f}..{max(spread):.3f})")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (torch.utils.benchmark syncs CUDA too)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), device {DEVICE}")
    if DEVICE.startswith("cuda"):
        n_mm, mm = pick(make_matmul, [2048, 4096, 6144, 8192, 12288], 1e-3)
        n_add, add = pick(make_add, [1 << 16, 1 << 20, 1 << 22, 1 << 24], 1e-5)
    else:
        n_mm, mm = pick(make_matmul, [128, 192, 256, 320, 384, 512], 1e-3)
        n_add, add = pick(make_add, [1024, 4096, 16384, 65536], 1e-5)
    print(f"matmul {n_mm}x{n_mm} (~{one_call_s(mm) * 1e3:.2f} ms/call), "
          f"add of {n_add} floats (~{one_call_s(add, 200) * 1e6:.1f} us/call)")
    compare(f"matmul {n_mm}", mm, args.rounds, args.threads)
    compare(f"add {n_add}", add, args.rounds, args.threads)


if __name__ == "__main__":
    main()
