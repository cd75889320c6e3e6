"""certify with n_jobs=2 against n_jobs=1 (same network, same inputs, one run).

Both runs give identical certificates (checked). n_jobs=1 already lets torch
use its default intra-op threads; n_jobs=2 runs two joblib (loky) workers, each
with its share of the cores.

    python benchmarks/bench_n_jobs.py [--inputs 256] [--n 100000] [--strategy cohen]

``--torch-threads 1 2`` runs the comparison once per thread count, in turn
(the n_jobs=1 run's torch threads; the workers keep joblib's share of the
cores). Seconds are wall time (the workers' CPU time is not this process's),
so each row records the load average at its start and end.
``--results-file benchmarks/results/digits.json`` writes the table into the
digits results file as ``--results-table`` (default ``n_jobs``), with the
command, commit and machine (``benchmarks/_results.py``).
"""

import argparse
import os
import time

import numpy as np
import torch
from _results import add_arguments, run_record, write_table

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
        nargs="+",
        default=[None],
        help="torch intra-op threads of the n_jobs=1 run, one comparison each "
        "(default: torch's)",
    )
    add_arguments(parser, "n_jobs", "benchmarks/results/digits.json")
    args = parser.parse_args()
    record = run_record()
    data = load_dataset("digits")
    clf = SmoothedClassifier(
        strategy=args.strategy, n=args.n, max_epochs=10, random_state=0
    ).fit(data.X_train, data.y_train)
    X = np.concatenate([data.X_test] * 2)[: args.inputs]
    clf.set_params(n_jobs=2).certify(X[:64])  # start the workers once
    rows = []
    for threads in args.torch_threads:
        if threads:
            torch.set_num_threads(threads)
        load_start = os.getloadavg()[0]
        times, certs = {1: [], 2: []}, {}
        for _ in range(args.repeats):
            for n_jobs in (1, 2):
                start = time.perf_counter()
                certs[n_jobs] = clf.set_params(n_jobs=n_jobs).certify(X)
                times[n_jobs].append(time.perf_counter() - start)
        assert np.array_equal(certs[1].p_lower, certs[2].p_lower)
        best = {k: min(v) for k, v in times.items()}
        threads = torch.get_num_threads()
        print(
            f"{args.inputs} inputs, n={args.n}, {args.strategy}, "
            f"torch threads {threads}"
        )
        speed_up = best[1] / best[2]
        print(f"n_jobs=1 {best[1]:.2f} s   n_jobs=2 {best[2]:.2f} s", end="   ")
        print(f"speed-up {speed_up:.2f}x", flush=True)
        rows.append(
            {
                "threads": threads,
                "load_start": load_start,
                "load_end": os.getloadavg()[0],
                "n_jobs_1": best[1],
                "n_jobs_2": best[2],
                "speed_up": speed_up,
            }
        )
    if args.results_file:
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            settings={
                "dataset": "digits",
                "inputs": len(X),
                "n": args.n,
                "strategy": args.strategy,
                "epochs": 10,
                "repeats": args.repeats,
                "clock": "wall",
                "random_state": 0,
            },
            record=record,
        )


#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "threads", "label": "torch threads of n_jobs=1", "format": "d"},
    {"key": "load_start", "label": "load at start", "format": ".1f"},
    {"key": "load_end", "label": "load at end", "format": ".1f"},
    {"key": "n_jobs_1", "label": "n_jobs=1 (s)", "format": ".2f"},
    {"key": "n_jobs_2", "label": "n_jobs=2 (s)", "format": ".2f"},
    {"key": "speed_up", "label": "n_jobs=2's speed-up", "format": ".2fx"},
]


if __name__ == "__main__":
    main()
