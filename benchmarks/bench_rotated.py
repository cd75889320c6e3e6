"""RANCER and RDDRS against ANCER on one trained network: AC R~, time, peak memory.

Trains the built-in MLP under Gaussian noise (digits, or a folder of idx files
such as Fashion-MNIST), then certifies the same held-out inputs with ancer,
rancer and rddrs (dense and rank-k), memory included. Prints certified accuracy
against the proxy radius, ACR, AC R~, seconds per input (and the ratio to
ancer, measured in this run) and the peak resident memory added by each
certification (tracemalloc does not see torch's allocations, so each strategy
runs in a fresh subprocess that resets the kernel's RSS high-water mark through
/proc/self/clear_refs after loading and reads VmHWM after certifying; loading's
own peak would otherwise hide the certification's).

    python benchmarks/bench_rotated.py --n-test 16 --n 5000
    python benchmarks/bench_rotated.py --data /usr/share/datasets/fashion-mnist \\
        --n-train 5000 --n-test 8 --n 2000 --epochs 3   # about 5 min on 2 cores

``--clock cpu`` times each certification by its process's CPU time (for a
shared machine). ``--results-file benchmarks/results/<dataset>.json`` writes
the table into that data set's results file as ``--results-table`` (default
``rotated``), with the command, commit and machine (``benchmarks/_results.py``).
"""

import argparse
import json
import os
import subprocess
import sys
import time

from _results import add_arguments, radii_column, run_record, write_table

CHILD = r"""
import json, sys, time
import joblib, numpy as np
from smoothlearn.strategies import ANCER, RANCER, RDDRS
from smoothlearn.metrics import average_certified_radius, certified_accuracy
clf, X, y, spec, radii, clock = joblib.load(sys.argv[1])
now = {"wall": time.perf_counter, "cpu": time.process_time}[clock]
name, params = spec
strategy = {"ancer": ANCER, "rancer": RANCER, "rddrs": RDDRS}[name](**params)
def status_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field + " missing from /proc/self/status")
with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM to the current RSS
    f.write("5")
before = status_kib("VmRSS")
start = now()
cert = clf.set_params(strategy=strategy).certify(X)
seconds = (now() - start) / len(X)
peak = status_kib("VmHWM")
print(json.dumps({
    "acc": [float(certified_accuracy(y, cert, r, proxy=True)) for r in radii],
    "acr": float(average_certified_radius(y, cert)),
    "acr_proxy": float(average_certified_radius(y, cert, proxy=True)),
    "s": seconds, "peak_mib": (peak - before) / 1024,
    "cert_mib": sum(
        a.nbytes for a in (cert.scale, cert.basis) if a is not None
    ) / 2**20,
}))
"""


def label(spec):
    """A row's name: ``ancer``, ``rancer, dense``, ``rddrs, rank 9``."""
    name, params = spec
    if name == "ancer":
        return name
    words = [f"rank {params['rank']}" if "rank" in params else "dense"]
    words += [f"{k} {v}" for k, v in params.items() if k != "rank"]
    return ", ".join([name, *words])


def columns(radii):
    """The table's columns in a results file (``benchmarks/_results.py``)."""
    return [
        {"key": "strategy", "label": "strategy"},
        radii_column("certified_accuracy_proxy", "certified accuracy at R~ =", radii),
        {"key": "acr", "label": "ACR", "format": ".3"},
        {"key": "acr_proxy", "label": "AC R~", "format": ".3"},
        {"key": "seconds", "label": "s/input", "format": ".3f"},
        {"key": "vs_ancer", "label": "vs ancer", "format": ".2fx"},
        {"key": "peak_mib", "label": "certify's peak memory (MiB)", "format": ".1f"},
        {"key": "cert_mib", "label": "certificates' shapes (MiB)", "format": ".2f"},
    ]


def main():
    import joblib

    from smoothlearn import SmoothedClassifier
    from smoothlearn.datasets import load_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="digits")
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--n-test", type=int, default=32)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--rank", type=int, default=9)
    parser.add_argument(
        "--rddrs-lr", type=float, default=None, help="RDDRS step (its default if unset)"
    )
    parser.add_argument("--radii", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    parser.add_argument(
        "--skip-dense",
        nargs="*",
        default=[],
        help="strategies to run rank-k only (e.g. rddrs on 784 inputs)",
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="seconds by the wall clock or by the certifying process's CPU time",
    )
    add_arguments(parser, "rotated", "benchmarks/results/<dataset>.json")
    args = parser.parse_args()
    record = run_record()

    data = load_dataset(args.data)
    X_train, y_train = data.X_train[: args.n_train], data.y_train[: args.n_train]
    X, y = data.X_test[: args.n_test], data.y_test[: args.n_test]
    clf = SmoothedClassifier(
        sigma=0.25, n=args.n, max_epochs=args.epochs, random_state=0
    ).fit(X_train, y_train)
    specs = [("ancer", {})]
    for name in ("rancer", "rddrs"):
        params = (
            {} if name == "rancer" or args.rddrs_lr is None else {"lr": args.rddrs_lr}
        )
        if name not in args.skip_dense:
            specs.append((name, params))
        specs.append((name, {**params, "rank": args.rank}))
    print(f"data={data.name} d={X.shape[1]} test={len(X)} n={args.n} rank={args.rank}")
    print(
        " | ".join(
            ["strategy"]
            + [f"R~={r:g}" for r in args.radii]
            + ["ACR", "ACR~", "s/input", "x ancer", "peak MiB", "cert MiB"]
        )
    )
    path = os.path.join("/tmp", f"bench_rotated_{os.getpid()}.joblib")
    ancer_seconds = None
    rows = []
    for spec in specs:
        joblib.dump((clf, X, y, spec, args.radii, args.clock), path)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        ancer_seconds = ancer_seconds or r["s"]
        rows.append(
            {
                "strategy": label(spec),
                "certified_accuracy_proxy": r["acc"],
                "acr": r["acr"],
                "acr_proxy": r["acr_proxy"],
                "seconds": r["s"],
                "vs_ancer": r["s"] / ancer_seconds,
                "peak_mib": r["peak_mib"],
                "cert_mib": r["cert_mib"],
            }
        )
        print(
            " | ".join(
                [label(spec)]
                + [f"{100 * a:.1f}" for a in r["acc"]]
                + [
                    f"{r['acr']:.3f}",
                    f"{r['acr_proxy']:.3f}",
                    f"{r['s']:.2f}",
                    f"{r['s'] / ancer_seconds:.2f}",
                    f"{r['peak_mib']:.0f}",
                    f"{r['cert_mib']:.2f}",
                ]
            ),
            flush=True,
        )
    os.remove(path)
    if args.results_file:
        write_table(
            args,
            columns=columns(args.radii),
            rows=rows,
            settings={
                "dataset": data.name,
                "features": X.shape[1],
                "train_inputs": len(X_train),
                "test_inputs": len(X),
                "n": args.n,
                "sigma": 0.25,
                "epochs": args.epochs,
                "rank": args.rank,
                "rddrs_lr": args.rddrs_lr,
                "skip_dense": args.skip_dense,
                "clock": args.clock,
                "random_state": 0,
            },
            record=record,
        )


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - started:.0f} s")
