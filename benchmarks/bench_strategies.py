"""Strategies on one trained network: certified accuracy, ACR, AC R~, time.

Trains the built-in MLP on scikit-learn's digits under Gaussian noise, then
certifies the same held-out inputs with each strategy at n = 100,000 (memory
included for the data-dependent ones) and prints the paper-style table with
the per-input time against cohen.

--oracle adds a diagnostic row that is NOT a certificate: per input, the best
of cohen's radii over a grid of sigmas (choosing after the fact is neither
sound nor memory-checked). It shows how much any per-input isotropic choice
could gain on this network.

    python benchmarks/bench_strategies.py [--n-test 200] [--n 100000] [--oracle]
    python benchmarks/bench_strategies.py --iso-iter 100 --iso-lr 0.01
"""

import argparse
import time

import numpy as np

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy_table
from smoothlearn.strategies import ANCER, Cohen, IsotropicDD


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="digits")
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--iso-iter", type=int, default=300)
    parser.add_argument("--iso-lr", type=float, default=0.04)
    parser.add_argument("--ancer-iter", type=int, default=100)
    parser.add_argument("--kappa", type=float, default=2.0)
    parser.add_argument(
        "--clip", default="0.001", help="soft-probability clamp, a float or 'auto'"
    )
    parser.add_argument("--oracle", action="store_true")
    parser.add_argument(
        "--strategies", nargs="+", default=["cohen", "isotropic_dd", "ancer"]
    )
    args = parser.parse_args()

    data = load_dataset(args.data)
    X, y = data.X_test[: args.n_test], data.y_test[: args.n_test]
    clf = SmoothedClassifier(
        sigma=args.sigma, n=args.n, max_epochs=args.epochs, random_state=0
    ).fit(data.X_train, data.y_train)
    clip = args.clip if args.clip == "auto" else float(args.clip)
    iso = IsotropicDD(n_iter=args.iso_iter, lr=args.iso_lr, clip=clip)
    strategies = {
        "cohen": Cohen(),
        "isotropic_dd": iso,
        "ancer": ANCER(
            n_iter=args.ancer_iter, kappa=args.kappa, clip=clip, isotropic=iso
        ),
    }
    results, seconds = {}, {}
    for name in args.strategies:
        start = time.perf_counter()
        results[name] = clf.set_params(strategy=strategies[name]).certify(X)
        seconds[name] = (time.perf_counter() - start) / len(X)
        memory = getattr(clf, "memory_", None)
        extra = ""
        if name != "cohen" and memory is not None:
            extra = (
                f" memory: {memory.n_reduced_} reduced, {memory.n_abstained_} abstained"
            )
        scale = results[name].scale
        ratio = seconds[name] / seconds.get("cohen", seconds[name])
        print(
            f"{name}: {seconds[name]:.3f} s/input ({ratio:.2f}x cohen), mean scale "
            f"{scale.mean():.3f} (min {scale.min():.3f}, max {scale.max():.3f}){extra}",
            flush=True,
        )
    if args.oracle:
        grid = [0.12, 0.18, 0.25, 0.35, 0.5, 0.75, 1.0]
        per_sigma = [clf.set_params(strategy="cohen", sigma=s).certify(X) for s in grid]
        clf.set_params(sigma=args.sigma)
        correct = np.array([(c.label == y) & ~c.abstained for c in per_sigma])
        radius = np.array(
            [np.where(ok, c.radius, 0.0) for c, ok in zip(per_sigma, correct)]
        )
        best = radius.argmax(axis=0)
        oracle = per_sigma[0][:]
        idx = np.arange(len(X))
        for field in ("label", "abstained", "gap", "scale", "p_lower"):
            getattr(oracle, field)[:] = np.array(
                [getattr(c, field) for c in per_sigma]
            )[best, idx]
        results["oracle sigma (diagnostic)"] = oracle
        print(
            "oracle sigma counts:",
            {s: int((best == i).sum()) for i, s in enumerate(grid)},
        )
    print(f"\ndigits test inputs: {len(X)}, n = {args.n}, training sigma {args.sigma}")
    print(certified_accuracy_table(y, results, [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]))


if __name__ == "__main__":
    main()
