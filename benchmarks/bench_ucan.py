"""UCAN's three noise generators against Cohen at equal mean sigma (UCAN figure 4).

Trains one network per strategy on image inputs (digits 8x8, or a folder of idx
files such as Fashion-MNIST 28x28): cohen at ``--sigma``, ucan_pattern,
ucan_universal and ucan_input at the same base ``--sigma``; then, for each
generator, cohen trained at the geometric mean of that generator's scales on the
test inputs ("equal mean sigma": the proxy radius, UCAN's ALM, compares
regions of equal volume per unit R). Prints certified accuracy against the
proxy radius (ALM), ACR (inscribed radius, UCAN Corollary 3.3), AC R~ (average
ALM), the geometric-mean sigma, clean accuracy and time; then paired bootstrap
95% intervals (inputs resampled together) of ACR and AC R~, each generator
against Cohen's noise at its own mean sigma (ucan_pattern's is the base
sigma, so against ``cohen``).

``--results-file benchmarks/results/<dataset>.json`` writes the table into
that data set's results file as ``--results-table`` (default
``ucan_equal_mean_sigma``), with the command, commit, machine and date,
keeping the file's other tables (``benchmarks/_results.py``).

    python benchmarks/bench_ucan.py                        # digits
    python benchmarks/bench_ucan.py --data /usr/share/datasets/fashion-mnist \\
        --n-train 10000 --n-test 100 --n 10000 --epochs 10
"""

import argparse
import time

import numpy as np
from _results import add_arguments, radii_column, run_record, write_table
from bench_quality import bootstrap_interval
from bench_training import contributions

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
    parser.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    add_arguments(parser, "ucan_equal_mean_sigma")
    args = parser.parse_args()
    if args.results_file and not args.results_file.endswith(".json"):
        parser.error(f"--results-file: a .json file, not {args.results_file}")
    if args.results_file and args.data == "digits":
        if not args.results_file.endswith("digits.json"):
            parser.error("--results-file: digits' file is digits.json")
    record = run_record()

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
    rows, per_input = [], {}

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
        row = table_row(label, sigma, scale, y, cert, args.radii, seconds)
        rows.append(row)
        for key, proxy in (("acr", False), ("acr_proxy", True)):
            per_input[(label, key)] = contributions(y, cert, proxy)
        text = [label, f"{row['sigma_gm']:.3f}"]
        text += [f"{100 * a:.1f}" for a in row["certified_accuracy_proxy"]]
        text += [
            f"{row['acr']:.3f}",
            f"{row['acr_proxy']:.3f}",
            f"{100 * row['clean']:.1f}",
            f"{seconds:.0f}",
        ]
        print(" | ".join(text), flush=True)
        return row["sigma_gm"], clf.alpha

    pairs = []  # (generator, the cohen row at its mean sigma)
    for strategy in args.strategies:
        gm, alpha = run(strategy, args.sigma, strategy)
        if strategy in ("ucan_universal", "ucan_input"):
            label = f"cohen at {strategy}'s mean sigma"
            run("cohen", gm, label)
            pairs.append((strategy, label))
        elif strategy.startswith("ucan") and "cohen" in args.strategies:
            pairs.append((strategy, "cohen"))
    intervals = differences(per_input, pairs, args.boot)
    for d in intervals:
        print(
            f"{d['a']} - {d['b']} {d['key']}: {d['mean']:+.3f} "
            f"[{d['low']:+.3f}, {d['high']:+.3f}]"
        )
    if args.results_file:
        settings = {
            "dataset": data.name,
            "inputs": len(X),
            "first_input": 0,
            "train_inputs": len(X_train),
            "n": args.n,
            "noise": args.noise,
            "sigma": args.sigma,
            "alpha": alpha,
            "epochs": args.epochs,
            "model": "built-in, on image inputs",
            "strategies": args.strategies,
            "bootstrap": args.boot,
        }
        write_table(
            args,
            columns=columns(args.radii),
            rows=rows,
            differences=intervals,
            settings=settings,
            record=record,
        )


def columns(radii):
    """The table's columns in a results file (``benchmarks/_results.py``)."""
    return [
        {"key": "strategy", "label": "strategy"},
        {"key": "sigma_gm", "label": "mean sigma", "format": ".3f"},
        radii_column(
            "certified_accuracy_proxy", "certified accuracy at proxy radius", radii
        ),
        {"key": "acr", "label": "ACR", "format": ".3"},
        {"key": "acr_proxy", "label": "mean proxy", "format": ".3"},
        {"key": "clean", "label": "clean", "format": ".3"},
        {"key": "seconds", "label": "train + certify s", "format": ".0f"},
    ]


def table_row(label, sigma, scale, y, cert, radii, seconds):
    """One row of the results file, at full precision: ``sigma_gm`` is the
    geometric mean of the noise scales on the test inputs (``sigma`` where
    every scale is it)."""
    return {
        "strategy": label,
        "sigma_gm": float(np.exp(np.log(scale).mean())),
        "certified_accuracy_proxy": [
            float(certified_accuracy(y, cert, r, proxy=True)) for r in radii
        ],
        "acr": average_certified_radius(y, cert),
        "acr_proxy": average_certified_radius(y, cert, proxy=True),
        "clean": float(clean_accuracy(y, cert)),
        "seconds": float(seconds),
    }


def differences(per_input, pairs, n_boot, seed=0):
    """Paired bootstrap intervals of ACR and AC R~ for each ``(a, b)`` of
    ``pairs`` (row labels); ``per_input`` maps ``(label, key)`` to the
    inputs' contributions."""
    rng = np.random.RandomState(seed)
    out = []
    for a, b in pairs:
        for key in ("acr", "acr_proxy"):
            mean, low, high = bootstrap_interval(
                per_input[(a, key)], per_input[(b, key)], n_boot, rng
            )
            out.append(
                {
                    "a": a,
                    "b": b,
                    "key": key,
                    "mean": float(mean),
                    "low": float(low),
                    "high": float(high),
                }
            )
    return out


if __name__ == "__main__":
    main()
