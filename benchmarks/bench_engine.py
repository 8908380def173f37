"""Scheduler speed: passes per second of the pure step function under a mixed load.

A steady agg engine holds ``--running`` requests (new ones arrive as others finish), prompts and
outputs drawn from a fixed-seed distribution, so that every pass mixes ~all decodes with a chunked
prefill now and then; prompts carry one prefix hash per 512 tokens (Mooncake style). Simulated time
advances by the mocker timing model (its cost is not what is measured).

    uv run python benchmarks/bench_engine.py [--running 128] [--passes 50000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from planner_core.engine import EngineRequest, MockerTiming, Scheduler, SchedulerConfig


def run(
    running: int, passes: int, seed: int, prefix_caching: bool, hash_tokens: int = 512
) -> dict[str, float]:
    rng = random.Random(seed)
    cfg = SchedulerConfig(
        max_num_seqs=max(256, running), enable_prefix_caching=prefix_caching, prefix_block_tokens=hash_tokens
    )
    sched = Scheduler(cfg, MockerTiming(cfg.kv_capacity_tokens))
    next_id = 0

    def new_request() -> EngineRequest:
        nonlocal next_id
        next_id += 1
        isl = int(rng.lognormvariate(7.0, 0.8)) + 1  # median ~1100 tokens
        osl = int(rng.lognormvariate(5.3, 0.6)) + 1  # median ~200 tokens
        # a few shared system-prompt blocks, the rest unique
        hashes = tuple(rng.randrange(8) if i < 1 else next_id * 4096 + i for i in range(isl // hash_tokens))
        return EngineRequest(next_id, isl, osl, hashes)

    pool = [new_request() for _ in range(passes + 4000 + running)]  # built up front: not timed
    feed = iter(pool)
    for _ in range(running):
        sched.add_request(next(feed))
    now = 0.0
    for _ in range(2000):  # warm up to a steady mix
        p = sched.step(now)
        now += p.duration_s
        for _ in p.finished_ids:
            sched.add_request(next(feed))
    tokens = decodes = prefill_passes = preemptions = 0
    step, add = sched.step, sched.add_request
    seg = max(1, passes // 5)
    best = float("inf")
    t0 = t_seg = time.perf_counter()
    for i in range(passes):
        p = step(now)
        now += p.duration_s
        decodes += p.sched_num_decode_requests
        tokens += p.sched_sum_prefill_tokens
        prefill_passes += p.sched_num_prefill_requests > 0
        preemptions += len(p.preempted_ids)
        for _ in p.finished_ids:
            add(next(feed))
        if i % seg == seg - 1:  # best segment: the machine is shared, noise only ever slows us down
            t = time.perf_counter()
            best = min(best, (t - t_seg) / seg)
            t_seg = t
    elapsed = time.perf_counter() - t0
    return {
        "running_target": running,
        "passes": passes,
        "passes_per_s": passes / elapsed,
        "us_per_pass": elapsed / passes * 1e6,
        "best_segment_passes_per_s": 1.0 / best,
        "mean_decode_batch": decodes / passes,
        "passes_with_prefill_frac": prefill_passes / passes,
        "prefill_tokens_per_pass": tokens / passes,
        "preemptions": preemptions,
        "simulated_s": now,
        "prefix_caching": prefix_caching,
        "hash_block_tokens": hash_tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--running", type=int, nargs="*", default=[64, 128, 200])
    ap.add_argument("--passes", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-prefix-caching", action="store_true")
    ap.add_argument(
        "--hash-block-tokens", type=int, default=512, help="tokens per prefix hash (Mooncake traces: 512)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = [
        run(r, args.passes, args.seed, not args.no_prefix_caching, args.hash_block_tokens)
        for r in args.running
    ]
    if args.json:
        print(json.dumps({"bench": "engine", "results": results}, indent=1))
        return
    print(
        f"{'running':>8} {'passes/s':>10} {'best seg':>10} {'us/pass':>8} {'decode batch':>13} {'prefill passes':>15} {'preempt':>8}"
    )
    for r in results:
        print(
            f"{r['running_target']:>8} {r['passes_per_s']:>10,.0f} {r['best_segment_passes_per_s']:>10,.0f} "
            f"{r['us_per_pass']:>8.1f} "
            f"{r['mean_decode_batch']:>13.1f} {r['passes_with_prefill_frac']:>15.1%} {r['preemptions']:>8}"
        )


if __name__ == "__main__":
    main()
