"""Training methods compared on digits (the structure of ancer.md Table 1).

The same architecture (built-in MLP), epochs and sigma for each training
method; each network certified with cohen and ancer (memory included) on the
same held-out inputs: clean accuracy of the smoothed classifier, certified
accuracy at radii 0.25 and 0.5, ACR and AC R~, and training time.

    python benchmarks/bench_training.py [--n-test 100] [--n 100000] [--epochs 20]
"""

import argparse
import time

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import average_certified_radius, certified_accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-test", type=int, default=100)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument(
        "--trainings",
        nargs="+",
        default=["gaussian", "consistency", "macer", "smoothadv"],
    )
    parser.add_argument("--strategies", nargs="+", default=["cohen", "ancer"])
    args = parser.parse_args()
    data = load_dataset("digits")
    X, y = data.X_test[: args.n_test], data.y_test[: args.n_test]
    names = (
        "training",
        "certify",
        "clean",
        "CA@0.25",
        "CA@0.5",
        "ACR",
        "ACR~",
        "train s",
    )
    widths = (-12, -8, 6, 8, 7, 6, 6, 8)
    header = " ".join(
        f"{n:<{-w}}" if w < 0 else f"{n:>{w}}" for n, w in zip(names, widths)
    )
    rows = []
    for training in args.trainings:
        start = time.perf_counter()
        clf = SmoothedClassifier(
            training=training,
            sigma=args.sigma,
            n=args.n,
            max_epochs=args.epochs,
            random_state=0,
        ).fit(data.X_train, data.y_train)
        train_seconds = time.perf_counter() - start
        for strategy in args.strategies:
            cert = clf.set_params(strategy=strategy).certify(X)
            ca = certified_accuracy(y, cert, [0.0, 0.25, 0.5])
            acr = average_certified_radius(y, cert)
            acr_proxy = average_certified_radius(y, cert, proxy=True)
            rows.append(
                f"{training:<12} {strategy:<8} {100 * ca[0]:>6.1f} "
                f"{100 * ca[1]:>8.1f} {100 * ca[2]:>7.1f} {acr:>6.3f} "
                f"{acr_proxy:>6.3f} {train_seconds:>8.1f}"
            )
            print(rows[-1], flush=True)
    print(
        f"\ndigits, {len(X)} test inputs, n = {args.n}, sigma = {args.sigma}, "
        f"{args.epochs} epochs, MLP (256, 256)"
    )
    print(header)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
