"""Smoothing on the inputs' grid against float noise: certificates and seconds.

One network (the built-in one, trained once under float gaussian noise) is
certified per strategy three ways on the same test inputs and seeds: on the
grid (``grid=step``: rounded noise drawn exactly, added in integers, sound in
floating point), with float noise as before (``grid=None``, with first-layer
reuse where the engine takes it), and with float noise on the plain path
(reuse off: what the grid path's forward passes compare with). Printed:
certified accuracy at each radius and ACR per path, the grid path minus the
float path with paired bootstrap 95% intervals, and seconds per input of each
path in the same run (interleaved, median of ``--repeats``) after a first
call of each path, whose seconds are printed apart: it builds what a process
keeps (the grid's rounded-noise tables, a strategy's optimised scales, which
later calls on the same inputs reuse on either path).

Run: ``python benchmarks/bench_grid.py --dataset digits --inputs 360 --n 10000``
(digits divided by 16 lie on the 1/16 grid; Fashion-MNIST on 1/255).
``--results-file benchmarks/results/<dataset>.json`` writes the paths' rows
(and the grid-minus-float intervals) as table ``--results-table`` (default
``grid``) of that data set's results file (``benchmarks/_results.py``).
"""

import argparse
import copy

import numpy as np
from _results import add_arguments, radii_column, run_record, write_table
from _timing import CLOCKS
from bench_quality import RADII, bootstrap_interval, load, parse_strategy

from smoothlearn import SmoothedClassifier
from smoothlearn.estimators._noisy_net import certification_network
from smoothlearn.grid import resolve_grid


def certify(clf, X, strategy, grid, reuse, clock="wall"):
    """Certificates and seconds per input for one path (a fresh memory)."""
    now = CLOCKS[clock]
    clf = copy.deepcopy(clf).set_params(strategy=strategy, grid=grid)
    network = certification_network(clf.net_, clf.input_shape_, len(clf.classes_))
    saved = network.reuse_first_layer
    network.reuse_first_layer = reuse
    try:
        start = now()
        cert = clf.certify(X)
        seconds = (now() - start) / len(X)
    finally:
        network.reuse_first_layer = saved
    return cert, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--images", action="store_true")
    parser.add_argument("--inputs", type=int, default=360)
    parser.add_argument("--train", type=int, default=None)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--strategies", nargs="+", default=["cohen", "ancer"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    # cpu: this process's CPU time, which other work on a shared machine
    # inflates far less than the wall time (benchmarks/_timing.py)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    add_arguments(parser, "grid")
    args = parser.parse_args()
    record = run_record()

    X_train, y_train, X_test, y_test = load(args.dataset, args.images)
    if args.train:
        X_train, y_train = X_train[: args.train], y_train[: args.train]
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    step = resolve_grid("auto", X_train)
    print(
        f"{args.dataset}: {len(X_train)} training, {len(X)} test inputs, grid step "
        f"{step!r}, sigma={args.sigma}, n={args.n}, {args.clock} clock"
    )
    clf = SmoothedClassifier(
        sigma=args.sigma, n=args.n, max_epochs=args.epochs, random_state=args.seed
    ).fit(X_train, y_train)
    rng = np.random.RandomState(args.seed)
    rows, differences = [], []
    for text in args.strategies:
        strategy = parse_strategy(text)
        # float first: its first call pays what every later call reuses (a
        # strategy's optimised scales), so the grid's first call adds only
        # the rounded-noise tables
        paths = {
            "float": (None, "auto"),
            "float, no reuse": (None, False),
            "grid": (step, False),
        }
        seconds = {name: [] for name in paths}
        certs, first = {}, {}
        for name, (grid, reuse) in paths.items():
            first[name] = certify(clf, X, strategy, grid, reuse, args.clock)[1]
        for _ in range(args.repeats):  # interleaved: the same load on each
            for name, (grid, reuse) in paths.items():
                certs[name], s = certify(clf, X, strategy, grid, reuse, args.clock)
                seconds[name].append(s)
        print(f"\n{text}")
        print(
            "path              "
            + "".join(f"  CA@{r:<5}" for r in RADII)
            + "     ACR   s/input"
        )
        correct = {k: (c.label == y) & ~c.abstained for k, c in certs.items()}
        for name in ("grid", "float", "float, no reuse"):
            rows.append(
                table_row(
                    f"{text}, {PATHS[name]}", certs[name], y, seconds[name], first[name]
                )
            )
            c = certs[name]
            row = "".join(
                f"  {np.mean(correct[name] & (c.radius >= r)):7.3f}" for r in RADII
            )
            acr = np.mean(np.where(correct[name], c.radius, 0.0))
            print(f"{name:16s}{row}  {acr:6.3f}  {np.median(seconds[name]):8.4f}")
        print("grid - float, paired bootstrap 95%:")
        for r in RADII:
            a = (correct["grid"] & (certs["grid"].radius >= r)).astype(float)
            b = (correct["float"] & (certs["float"].radius >= r)).astype(float)
            mean, low, high = bootstrap_interval(a, b, args.boot, rng)
            print(f"  CA@{r}: {mean:+.4f} [{low:+.4f}, {high:+.4f}]")
            differences.append(
                difference(text, f"certified_accuracy@{r:g}", mean, low, high)
            )
        a = np.where(correct["grid"], certs["grid"].radius, 0.0)
        b = np.where(correct["float"], certs["float"].radius, 0.0)
        mean, low, high = bootstrap_interval(a, b, args.boot, rng)
        differences.append(difference(text, "acr", mean, low, high))
        print(
            f"  ACR:    {mean:+.4f} [{low:+.4f}, {high:+.4f}]  "
            f"({100 * mean / max(b.mean(), 1e-12):+.2f}% of float ACR)"
        )
        ratio = np.median(seconds["grid"]) / np.median(seconds["float, no reuse"])
        reuse = np.median(seconds["grid"]) / np.median(seconds["float"])
        print(
            f"  seconds: grid / float plain path {ratio:.3f}x, "
            f"grid / float with reuse {reuse:.3f}x"
        )
        print(
            "  first call of each path, s/input: "
            + ", ".join(f"{name} {s:.4f}" for name, s in first.items())
        )
    if args.results_file:
        settings = {
            "dataset": args.dataset,
            "train_inputs": len(X_train),
            "epochs": args.epochs,
            "inputs": len(X),
            "grid_step": step,
            "n": args.n,
            "sigma": args.sigma,
            "alpha": clf.alpha,
            "strategies": args.strategies,
            "repeats": args.repeats,
            "clock": args.clock,
            "seed": args.seed,
            "bootstrap": args.boot,
        }
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            differences=differences,
            settings=settings,
            record=record,
        )


#: A path's name in the results file's rows ("cohen, grid", ...).
PATHS = {"grid": "grid", "float": "float", "float, no reuse": "float plain"}

#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "path", "label": "strategy, path"},
    radii_column("certified_accuracy", "certified accuracy at", RADII),
    {"key": "acr", "label": "ACR", "format": ".3"},
    {"key": "seconds", "label": "s/input", "format": ".4f"},
    {"key": "first_seconds", "label": "first call, s/input", "format": ".4f"},
]


def table_row(path, cert, y, seconds, first):
    """A path's row at full precision: certified accuracy at ``RADII`` and
    ACR of ``cert`` against labels ``y``, the median of the repeats'
    ``seconds`` per input and the first call's."""
    correct = (cert.label == y) & ~cert.abstained
    return {
        "path": path,
        "certified_accuracy": [
            float(np.mean(correct & (cert.radius >= r))) for r in RADII
        ],
        "acr": float(np.mean(np.where(correct, cert.radius, 0.0))),
        "seconds": float(np.median(seconds)),
        "first_seconds": float(first),
    }


def difference(strategy, key, mean, low, high):
    """Grid minus float of ``key`` for ``strategy``, with its interval."""
    return {
        "a": f"{strategy}, grid",
        "b": f"{strategy}, float",
        "key": key,
        "mean": float(mean),
        "low": float(low),
        "high": float(high),
    }


if __name__ == "__main__":
    main()
