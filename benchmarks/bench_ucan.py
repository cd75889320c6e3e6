"""UCAN's three noise generators against Cohen at equal mean sigma (UCAN figure 4).

Trains one network per strategy on image inputs (digits 8x8, or a folder of idx
files such as Fashion-MNIST 28x28): cohen at ``--sigma``, ucan_pattern,
ucan_universal and ucan_input at the same base ``--sigma``; then, for each
generator, cohen trained at the geometric mean of that generator's scales on the
test inputs ("equal mean sigma": the proxy radius, UCAN's ALM, compares
regions of equal volume per unit R). Prints certified accuracy against the
proxy radius (ALM), ACR (inscribed radius, UCAN Corollary 3.3), AC R~ (average
ALM), the geometric-mean sigma, clean accuracy and time.

    python benchmarks/bench_ucan.py                        # digits
    python benchmarks/bench_ucan.py --data /usr/share/datasets/fashion-mnist \\
        --n-train 10000 --n-test 100 --n 10000 --epochs 10
"""

import argparse
import time

import numpy as np

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import (
    average_certified_radius,
    certified_accuracy,
    clean_accuracy,
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="digits")
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--noise", default="gaussian")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument(
        "--radii", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0]
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["cohen", "ucan_pattern", "ucan_universal", "ucan_input"],
    )
    args = parser.parse_args()

    data = load_dataset(args.data).as_images()
    X_train, y_train = data.X_train[: args.n_train], data.y_train[: args.n_train]
    X, y = data.X_test[: args.n_test], data.y_test[: args.n_test]
    print(
        f"data={data.name} inputs {X.shape[1:]} train={len(X_train)} test={len(X)} "
        f"n={args.n} noise={args.noise} sigma={args.sigma} epochs={args.epochs}"
    )
    header = ["strategy", "sigma_gm"]
    header += [f"ALM={r:g}" for r in args.radii] + ["ACR", "ALM avg", "clean", "s"]
    print(" | ".join(header))

    def run(strategy, sigma, label):
        start = time.perf_counter()
        clf = SmoothedClassifier(
            strategy=strategy,
            noise=args.noise,
            sigma=sigma,
            n=args.n,
            max_epochs=args.epochs,
            random_state=0,
        ).fit(X_train, y_train)
        cert = clf.certify(X)
        seconds = time.perf_counter() - start
        _, scale = clf.noise_parameters(X)
        gm = float(np.exp(np.log(scale).mean()))
        row = [label, f"{gm:.3f}"]
        row += [
            f"{100 * certified_accuracy(y, cert, r, proxy=True):.1f}"
            for r in args.radii
        ]
        row += [
            f"{average_certified_radius(y, cert):.3f}",
            f"{average_certified_radius(y, cert, proxy=True):.3f}",
            f"{100 * clean_accuracy(y, cert):.1f}",
            f"{seconds:.0f}",
        ]
        print(" | ".join(row), flush=True)
        return gm

    for strategy in args.strategies:
        gm = run(strategy, args.sigma, strategy)
        if strategy in ("ucan_universal", "ucan_input"):
            run("cohen", gm, f"cohen @ sigma={gm:.3f} (equal mean sigma)")


if __name__ == "__main__":
    main()
