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
"""

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
import joblib, numpy as np
from smoothlearn.strategies import ANCER, RANCER, RDDRS
from smoothlearn.metrics import average_certified_radius, certified_accuracy
clf, X, y, spec, radii = joblib.load(sys.argv[1])
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
start = time.perf_counter()
cert = clf.set_params(strategy=strategy).certify(X)
seconds = (time.perf_counter() - start) / len(X)
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
    args = parser.parse_args()

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
    for spec in specs:
        joblib.dump((clf, X, y, spec, args.radii), path)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        ancer_seconds = ancer_seconds or r["s"]
        label = " ".join([spec[0]] + [f"{k} {v}" for k, v in spec[1].items()])
        print(
            " | ".join(
                [label]
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


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - started:.0f} s")
