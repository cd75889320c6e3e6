"""certify with n_jobs=2 against n_jobs=1 (same network, same inputs, one run).

Both runs give identical certificates (checked). n_jobs=1 already lets torch
use its default intra-op threads; n_jobs=2 runs two joblib (loky) workers, each
with its share of the cores.

    python benchmarks/bench_n_jobs.py [--inputs 256] [--n 100000] [--strategy cohen]
"""

import argparse
import time

import numpy as np
import torch

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=256)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--strategy", default="cohen")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch intra-op threads of the n_jobs=1 run (default: torch's)",
    )
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    data = load_dataset("digits")
    clf = SmoothedClassifier(
        strategy=args.strategy, n=args.n, max_epochs=10, random_state=0
    ).fit(data.X_train, data.y_train)
    X = np.concatenate([data.X_test] * 2)[: args.inputs]
    clf.set_params(n_jobs=2).certify(X[:64])  # start the workers once
    times, certs = {1: [], 2: []}, {}
    for _ in range(args.repeats):
        for n_jobs in (1, 2):
            start = time.perf_counter()
            certs[n_jobs] = clf.set_params(n_jobs=n_jobs).certify(X)
            times[n_jobs].append(time.perf_counter() - start)
    assert np.array_equal(certs[1].p_lower, certs[2].p_lower)
    best = {k: min(v) for k, v in times.items()}
    threads = torch.get_num_threads()
    print(f"{args.inputs} inputs, n={args.n}, {args.strategy}, torch threads {threads}")
    speed_up = best[1] / best[2]
    print(f"n_jobs=1 {best[1]:.2f} s   n_jobs=2 {best[2]:.2f} s", end="   ")
    print(f"speed-up {speed_up:.2f}x")


if __name__ == "__main__":
    main()
