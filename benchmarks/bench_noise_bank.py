"""Cost of one noise-bank chunk against float32 ``torch.randn`` of the same size.

A chunk is ``CHUNK_ROWS x n_features`` standard-form draws with exact tails
(:meth:`smoothlearn.noise.NoiseFamily.bank_sample`): the first thing every
certification pays for, shared by all inputs of a block, so when a user
certifies a few inputs its cost shows directly. Each family's chunk is timed
as the engine draws it (``NoiseBank.chunk`` of a new chunk index each round),
interleaved with ``torch.randn`` and with the construction the banks used
before (53-bit float64 uniforms through the float64 quantile, rounded to
float32); best and median of the rounds.

Target: every family <= 1.2x float32 randn. ``--device cuda`` times the
banks as a GPU certification draws them (on that device, from its generator),
against ``torch.randn`` there; each run waits for the device.

    python benchmarks/bench_noise_bank.py [--features 784] [--repeats 41]
    python benchmarks/bench_noise_bank.py --device cuda

``--results-file benchmarks/results/synthetic.json`` writes the table (no data
set: random draws) as ``--results-table`` (default ``noise_bank``), one row
per contender with its best and median ms and their ratios to randn, with the
command, commit and machine (``benchmarks/_results.py``).
"""

import argparse
import itertools

import torch
from _results import add_arguments, run_record, write_table
from _timing import best_of, median_of

from smoothlearn.banks import CHUNK_ROWS, NoiseBank
from smoothlearn.noise import NOISES, get_noise


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=784)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--device", default="cpu")
    add_arguments(parser, "noise_bank", "benchmarks/results/synthetic.json")
    args = parser.parse_args()
    if args.features < 1 or args.repeats < 1:
        parser.error("--features and --repeats must be positive")
    record = run_record(args.device)
    d, n, device = args.features, CHUNK_ROWS * args.features, torch.device(args.device)
    gen = torch.Generator(device=device).manual_seed(0)
    chunks = itertools.count(1)

    def waited(fn):
        # device work is asynchronous: a run ends when the device is done
        if device.type != "cuda":
            return fn
        return lambda: (fn(), torch.cuda.synchronize())

    runs = {"float32 randn": lambda: torch.randn(n, generator=gen, device=device)}
    for name in sorted(NOISES):
        bank = NoiseBank(0, 1, get_noise(name), d, device=device)
        runs[name] = lambda bank=bank: bank.chunk(next(chunks))
    gaussian = get_noise("gaussian")
    runs["gaussian, float64 quantile (before)"] = lambda: gaussian.sample(
        (CHUNK_ROWS, d), generator=gen, dtype=torch.float64, device=device
    ).float()
    runs = {label: waited(fn) for label, fn in runs.items()}
    for fn in runs.values():  # warm up (kernel loading, the banks' buffers)
        fn()
    on = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"one chunk of {CHUNK_ROWS} x {d} draws on {on}, torch threads "
        f"{torch.get_num_threads()}, {args.repeats} interleaved rounds"
    )
    rows = {name: {"contender": name} for name in runs}
    for label, timing in (("best", best_of), ("median", median_of)):
        t = timing(runs, args.repeats)
        base = t["float32 randn"]
        print(f"{label}:")
        for name, seconds in t.items():
            print(f"  {name:<36} {1e3 * seconds:6.2f} ms  {seconds / base:5.2f}x randn")
            rows[name][f"{label}_ms"] = 1e3 * seconds
            rows[name][f"{label}_ratio"] = seconds / base
    if args.results_file:
        write_table(
            args,
            columns=COLUMNS,
            rows=list(rows.values()),
            settings={
                "chunk_rows": CHUNK_ROWS,
                "features": d,
                "repeats": args.repeats,
                "timing": "interleaved rounds, best pass then median pass",
                "clock": "wall",
                "device": str(device),
                "torch_threads": torch.get_num_threads(),
                "seed": 0,
            },
            record=record,
        )


#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "contender", "label": "one chunk"},
    {"key": "best_ms", "label": "best (ms)", "format": ".2f"},
    {"key": "best_ratio", "label": "best / randn", "format": ".2fx"},
    {"key": "median_ms", "label": "median (ms)", "format": ".2f"},
    {"key": "median_ratio", "label": "median / randn", "format": ".2fx"},
]


if __name__ == "__main__":
    main()
