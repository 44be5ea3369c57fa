"""`nnhal batch --address` on a two-node Ray cluster started on this machine with `ray start`, as docs/ray.md shows.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/ray_cluster.py [--rows 64] [--model ...]

Starts a head (`ray start --head`, token authentication on, 1 CPU and one unit of the custom resource
nnhal_cpu) and a worker node (`ray start --address`, the same), each in a session and temp dir of its own,
runs `nnhal batch MODEL rows.npz out --address 127.0.0.1:PORT --actors 2 --resource nnhal_cpu=1` (one actor
per node), prints what it printed, then stops both nodes. Both nodes share this machine's cores: the figure
is the cluster path's throughput and overhead (actor start, a part per task, the summary), not a
speed-up over one node. The job is run twice on the same cluster: the second rate is with warm nodes.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # tests.ray.cluster: the nodes, by session

from nnhal.zoo import input_for, resolve  # noqa: E402
from tests.ray.cluster import new_cluster  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zoo:resnet50?weights=random")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--rows-per-part", type=int, default=4)
    parser.add_argument("--out", default=None, help="also write the printed lines to this file")
    args = parser.parse_args(argv)
    lines: list[str] = []

    def say(*new: str) -> None:
        lines.extend(new)
        print("\n".join(new), flush=True)

    say(f"benchmarks/ray_cluster.py {' '.join(argv)}  (OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset: "
             f"{'OPENBLAS_CORETYPE' not in os.environ and 'OPENBLAS_L2_SIZE' not in os.environ}); "
             f"load average before {os.getloadavg()[0]:.2f}")
    proto = resolve(args.model)
    samples = [input_for(proto, seed=i) for i in range(args.rows)]
    cluster = new_cluster()
    try:
        t0 = time.perf_counter()
        cluster.start_head_and_worker(dict(num_cpus=1, resources={"nnhal_cpu": 1}),
                                      dict(num_cpus=1, resources={"nnhal_cpu": 1}))
        say(f"two nodes started in {time.perf_counter() - t0:.1f} s: head {cluster.nodes[0].node_id}, "
                     f"worker {cluster.nodes[1].node_id}")
        with tempfile.TemporaryDirectory() as work:
            npz = Path(work) / "rows.npz"
            np.savez(npz, **{k: np.concatenate([s[k] for s in samples]) for k in samples[0]})
            for run in (1, 2):
                command = [sys.executable, "-m", "nnhal.cli.main", "batch", args.model, str(npz),
                           str(Path(work) / f"out{run}"), "--address", cluster.address, "--actors", "2",
                           "--threads", "1", "--rows-per-part", str(args.rows_per_part), "--resource", "nnhal_cpu=1"]
                t0 = time.perf_counter()
                done = subprocess.run(command, capture_output=True, text=True, env=cluster.env, check=False)
                wall = time.perf_counter() - t0
                if done.returncode != 0:
                    raise SystemExit(f"nnhal batch failed ({done.returncode}): {done.stderr[-3000:]}")
                say(f"run {run}: $ nnhal batch {args.model} rows.npz out --address {cluster.address} "
                             f"--actors 2 --threads 1 --rows-per-part {args.rows_per_part} --resource nnhal_cpu=1")
                say(*[line for line in done.stdout.splitlines() if not line.startswith("output:")])
                say(f"run {run}: {wall:.1f} s for the whole command (Python start and connect included)")
    finally:
        survivors = cluster.stop()
    say(f"both nodes stopped, {len(survivors)} process(es) left; load average after {os.getloadavg()[0]:.2f}")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
