"""certify against the bare batched forward passes it needs (DESIGN.md section 8).

The floor: the same network, in eval mode under inference_mode, called on
ready-made batches of ``batch_size`` noisy inputs, as many times as certify's
n0 + n draws per input need. Nothing else: no noise generation, no counting.
Target: certify wall time <= 1.15x the floor on the plain path (the network
wrapped so that its first linear map is hidden from smoothlearn); the default
path, reusing the first layer's response to the noise, is also reported. All
are timed in one run, interleaved, best of ``--repeats``, with what certify
does beside the passes (one count of n0 + n draws through a network that does
no work) and the noise bank's part of it, by the wall clock
or (``--clock cpu``) by this process's CPU time, which other work on a shared
machine inflates far less.

    python benchmarks/bench_certify_overhead.py [--inputs 20] [--n 100000] [--clock cpu]

``--results-file benchmarks/results/digits.json`` writes the table into the
digits results file as ``--results-table`` (default ``certify_overhead``), one
row per timed part with its seconds and its ratio to the floor, with the
command, commit and machine (``benchmarks/_results.py``).
"""

import argparse

import numpy as np
import torch
from _results import add_arguments, run_record, write_table
from _timing import CLOCKS, best_of
from sklearn.datasets import load_digits
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.banks import CHUNK_ROWS, ESTIMATION, NoiseBank
from smoothlearn.counting import count_classes
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale


class NoWork(nn.Module):
    """A network that does no work (the first 10 inputs as class scores):
    counting with it times everything certify does beside the passes."""

    def forward(self, X):
        return X[:, :10].contiguous()

    def smoothlearn_first_linear(self):
        return None


class Opaque(nn.Module):
    """The same network, declaring that it has no first linear map to reuse
    (smoothlearn would otherwise find it by tracing)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, X):
        return self.inner(X)

    def smoothlearn_first_linear(self):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=20)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--n0", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    add_arguments(parser, "certify_overhead", "benchmarks/results/digits.json")
    args = parser.parse_args()
    if min(args.inputs, args.n, args.n0, args.batch_size, args.repeats) < 1:
        parser.error("--inputs, --n, --n0, --batch-size, --repeats must be positive")
    record = run_record()

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    clf = SmoothedClassifier(
        module__hidden_units=tuple(args.hidden),
        max_epochs=2,
        n=args.n,
        n0=args.n0,
        batch_size=args.batch_size,
        random_state=0,
    ).fit(X, y)
    X_test = X[: args.inputs]
    module = clf.net_.module_.eval()
    plain = SmoothedClassifier(
        Opaque(module),
        max_epochs=0,
        n=args.n,
        n0=args.n0,
        batch_size=args.batch_size,
        random_state=0,
    ).fit(X, y)
    batch = torch.randn(args.batch_size, 64)
    passes = int(np.ceil(args.inputs * (args.n + args.n0) / args.batch_size))

    def floor():
        with torch.inference_mode():
            for _ in range(passes):
                module(batch)

    no_work = FlatInputNetwork(NoWork(), (64,), 10)
    draws = args.n + args.n0

    def beside():
        bank = NoiseBank(0, ESTIMATION, get_noise("gaussian"), 64)
        scale = Scale(np.full(args.inputs, 0.25))
        count_classes(no_work, X_test, scale, bank, draws, batch_size=args.batch_size)

    def noise():
        bank = NoiseBank(0, ESTIMATION, get_noise("gaussian"), 64)
        for j in range(-(-draws // CHUNK_ROWS)):
            bank.chunk(j)

    runs = {
        "floor": floor,
        "certify plain": lambda: plain.certify(X_test),
        "certify fused": lambda: clf.certify(X_test),
        "beside passes": beside,
        "noise bank": noise,
    }
    best = best_of(runs, args.repeats, args.clock)
    threads = torch.get_num_threads()
    print(
        f"torch threads {threads}, {passes} passes of {args.batch_size}, "
        f"{args.clock} clock"
    )
    for name, seconds in best.items():
        print(
            f"{name:<14} {seconds:.3f} s   ratio to floor {seconds / best['floor']:.3f}"
        )
    print("target: certify plain / floor <= 1.15")
    if args.results_file:
        rows = [
            {"part": name, "seconds": seconds, "vs_floor": seconds / best["floor"]}
            for name, seconds in best.items()
        ]
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            settings={
                "dataset": "digits",
                "inputs": len(X_test),
                "n": args.n,
                "n0": args.n0,
                "batch_size": args.batch_size,
                "hidden": args.hidden,
                "epochs": 2,
                "sigma": 0.25,
                "passes": passes,
                "repeats": args.repeats,
                "timing": "interleaved, best of repeats",
                "clock": args.clock,
                "torch_threads": threads,
                "random_state": 0,
            },
            record=record,
        )


#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "part", "label": "timed"},
    {"key": "seconds", "label": "seconds", "format": ".3f"},
    {"key": "vs_floor", "label": "ratio to the floor", "format": ".3f"},
]


if __name__ == "__main__":
    main()
