"""How much first-layer reuse can save at most, from per-operation times.

For an MLP ``in -> 256 -> 256 -> 10`` the naive loop pays, per noisy draw,
noise generation and every layer; first-layer reuse (``L(x + s z) = L x +
s L z`` with ``L z`` shared by all inputs) pays the add, the later layers and
the count. This times each operation on a batch of 1,000 draws (best of 5
runs of ``--reps`` calls) and prints the ratio reuse can reach at most, to
set beside ``bench_first_layer.py``'s measured naive/fused ratio.

    python benchmarks/bench_reuse_ceiling.py [--features 64 784]

``--results-file benchmarks/results/synthetic.json`` writes the table (random
inputs, no data set) as ``--results-table`` (default ``reuse_ceiling``), one
row per feature count, with the command, commit and machine
(``benchmarks/_results.py``).
"""

import argparse
import time

import torch
from _results import add_arguments, run_record, write_table
from torch import nn


def best_ms(function, reps):
    function()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            function()
        runs.append((time.perf_counter() - start) / reps * 1e3)
    return min(runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, nargs="+", default=[64, 784])
    parser.add_argument("--reps", type=int, default=200)
    add_arguments(parser, "reuse_ceiling", "benchmarks/results/synthetic.json")
    args = parser.parse_args()
    if min(args.features) < 1 or args.reps < 1:
        parser.error("--features and --reps must be positive")
    record = run_record()
    rows = []
    torch.manual_seed(0)
    print(f"ms per 1,000 draws, torch threads {torch.get_num_threads()}")
    for d in args.features:
        fc1, fc2, fc3 = nn.Linear(d, 256), nn.Linear(256, 256), nn.Linear(256, 10)
        x = torch.randn(1000, d)
        h = torch.relu(fc1(x))
        out = fc3(torch.relu(fc2(h)))
        with torch.inference_mode():
            t = {
                "randn": best_ms(lambda: torch.randn(1000, d), args.reps),
                "fc1": best_ms(lambda: fc1(x), args.reps),
                "add": best_ms(lambda: h + h, args.reps),
                "relu": best_ms(lambda: torch.relu(h), args.reps),
                "fc2": best_ms(lambda: fc2(h), args.reps),
                "fc3": best_ms(lambda: fc3(h), args.reps),
                "count": best_ms(
                    lambda: torch.bincount(out.argmax(1), minlength=10), args.reps
                ),
            }
        later = 2 * t["relu"] + t["fc2"] + t["fc3"] + t["count"]
        naive = t["randn"] + t["fc1"] + later
        reuse = t["add"] + later
        print(
            f"{d:>4} features: "
            + "  ".join(f"{k} {v:.3f}" for k, v in t.items())
            + f"  | naive {naive:.3f}  reuse {reuse:.3f}  ceiling {naive / reuse:.2f}x"
        )
        rows.append(
            {
                "features": d,
                **t,
                "naive": naive,
                "reuse": reuse,
                "ceiling": naive / reuse,
            }
        )
    if args.results_file:
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            settings={
                "model": "MLP in -> 256 -> 256 -> 10",
                "draws": 1000,
                "features": args.features,
                "reps": args.reps,
                "runs": 5,
                "timing": "best of 5 runs of reps calls",
                "clock": "wall",
                "torch_threads": torch.get_num_threads(),
                "seed": 0,
            },
            record=record,
        )


#: The table's columns in a results file (``benchmarks/_results.py``): ms per
#: 1,000 draws of each operation, the two paths' sums and their ratio.
COLUMNS = [
    {"key": "features", "label": "input features", "format": "d"},
    *(
        {"key": key, "label": f"{key} (ms)", "format": ".3f"}
        for key in ("randn", "fc1", "add", "relu", "fc2", "fc3", "count")
    ),
    {"key": "naive", "label": "naive (ms)", "format": ".3f"},
    {"key": "reuse", "label": "reuse (ms)", "format": ".3f"},
    {"key": "ceiling", "label": "ceiling (naive / reuse)", "format": ".2fx"},
]


if __name__ == "__main__":
    main()
