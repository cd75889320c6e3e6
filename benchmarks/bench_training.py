"""Training methods compared on digits (the structure of ancer.md Table 1).

The same architecture (built-in MLP), epochs and sigma for each training
method; each network certified with cohen and ancer (memory included) on the
same held-out inputs: clean accuracy of the smoothed classifier, certified
accuracy at radii 0.25 and 0.5, ACR and AC R~, and training time. Then paired
bootstrap 95% intervals (inputs resampled together) of each method's ACR
against noise augmentation's (``gaussian``) under the same strategy, and of
ancer's ACR and AC R~ against cohen's on the same network.

``--results-file benchmarks/results/digits.json`` writes the table into the
digits results file as ``--results-table`` (default ``training``), with the
command, commit, machine and date, keeping the file's other tables
(``benchmarks/_results.py``).

    python benchmarks/bench_training.py [--n-test 100] [--n 100000] [--epochs 20]
"""

import argparse
import time
from pathlib import Path

import numpy as np
from _results import add_arguments, run_record, write_table
from bench_quality import bootstrap_interval

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import average_certified_radius, certified_accuracy

RADII = (0.0, 0.25, 0.5)

#: The table's columns in a results file (``benchmarks/_results.py``); the
#: first names a row (training and strategy together).
COLUMNS = [
    {"key": "model", "label": "training, strategy"},
    {"key": "clean", "label": "clean", "format": ".3"},
    {"key": "certified_025", "label": "cert. at .25", "format": ".3"},
    {"key": "certified_05", "label": "cert. at .5", "format": ".3"},
    {"key": "acr", "label": "ACR", "format": ".3"},
    {"key": "acr_proxy", "label": "AC R~", "format": ".3"},
    {"key": "train_seconds", "label": "train s", "format": ".1f"},
]


def table_row(training, strategy, y, cert, train_seconds):
    """One row of the results file, at full precision."""
    ca = certified_accuracy(y, cert, list(RADII))
    return {
        "model": f"{training}, {strategy}",
        "clean": float(ca[0]),
        "certified_025": float(ca[1]),
        "certified_05": float(ca[2]),
        "acr": average_certified_radius(y, cert),
        "acr_proxy": average_certified_radius(y, cert, proxy=True),
        "train_seconds": float(train_seconds),
    }


def contributions(y, cert, proxy=False):
    """Each input's part of ACR (or AC R~): its radius where certified
    correct, else 0."""
    correct = ~np.asarray(cert.abstained) & (np.asarray(cert.label) == y)
    radius = cert.proxy_radius if proxy else cert.radius
    return np.where(correct, radius, 0.0)


def differences(per_input, trainings, strategies, n_boot, seed=0):
    """Paired bootstrap intervals: each training's ACR against ``gaussian``'s
    under the same strategy, and ancer's ACR and AC R~ against cohen's on the
    same network. ``per_input`` maps ``(training, strategy, key)`` to the
    inputs' contributions (``key`` ``"acr"`` or ``"acr_proxy"``)."""
    rng = np.random.RandomState(seed)
    pairs = []
    if "gaussian" in trainings:
        pairs += [
            ((t, s), ("gaussian", s), "acr")
            for s in strategies
            for t in trainings
            if t != "gaussian"
        ]
    if "cohen" in strategies and "ancer" in strategies:
        pairs += [
            ((t, "ancer"), (t, "cohen"), key)
            for t in trainings
            for key in ("acr", "acr_proxy")
        ]
    out = []
    for a, b, key in pairs:
        mean, low, high = bootstrap_interval(
            per_input[(*a, key)], per_input[(*b, key)], n_boot, rng
        )
        out.append(
            {
                "a": ", ".join(a),
                "b": ", ".join(b),
                "key": key,
                "mean": float(mean),
                "low": float(low),
                "high": float(high),
            }
        )
    return out


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
    parser.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    add_arguments(parser, "training", "benchmarks/results/digits.json")
    args = parser.parse_args()
    if args.results_file and Path(args.results_file).name != "digits.json":
        parser.error(
            f"--results-file: digits' file is digits.json, not {args.results_file}"
        )
    record = run_record()
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
    lines, rows, per_input = [], [], {}
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
            row = table_row(training, strategy, y, cert, train_seconds)
            rows.append(row)
            for key, proxy in (("acr", False), ("acr_proxy", True)):
                per_input[(training, strategy, key)] = contributions(y, cert, proxy)
            lines.append(
                f"{training:<12} {strategy:<8} {100 * row['clean']:>6.1f} "
                f"{100 * row['certified_025']:>8.1f} "
                f"{100 * row['certified_05']:>7.1f} {row['acr']:>6.3f} "
                f"{row['acr_proxy']:>6.3f} {train_seconds:>8.1f}"
            )
            print(lines[-1], flush=True)
    print(
        f"\ndigits, {len(X)} test inputs, n = {args.n}, sigma = {args.sigma}, "
        f"{args.epochs} epochs, MLP (256, 256)"
    )
    print(header)
    print("\n".join(lines))
    intervals = differences(per_input, args.trainings, args.strategies, args.boot)
    for d in intervals:
        print(
            f"{d['a']} - {d['b']} {d['key']}: {d['mean']:+.3f} "
            f"[{d['low']:+.3f}, {d['high']:+.3f}]"
        )
    if args.results_file:
        settings = {
            "dataset": "digits",
            "inputs": len(X),
            "first_input": 0,
            "n": args.n,
            "sigma": args.sigma,
            "alpha": clf.alpha,
            "epochs": args.epochs,
            "model": "built-in MLP (256, 256)",
            "train_inputs": len(data.X_train),
            "trainings": args.trainings,
            "strategies": args.strategies,
            "memory": str(clf.memory),
            "bootstrap": args.boot,
        }
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            differences=intervals,
            settings=settings,
            record=record,
        )


if __name__ == "__main__":
    main()
