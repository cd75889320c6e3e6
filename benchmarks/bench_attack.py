"""Empirical robust accuracy (PGD on the smoothed soft classifier) beside
certified accuracy, on digits with the built-in MLP.

One network (the command line's defaults: built-in MLP, gaussian noise
augmentation, sigma 0.25, 20 epochs) certified with each strategy (memory
included), then attacked by :func:`smoothlearn.attacks.smoothed_pgd_attack` at
each radius with the scale each strategy chose at the clean input. Per
strategy and radius: certified accuracy, empirical robust accuracy (an upper
bound: it must be at or above certified accuracy), inputs certified at the
radius that the attack made wrong (a PREDICT abstention, or a flip), flips
inside any certified region (must be 0), flips found by attacking each
certified prediction anywhere in its own region
(:func:`smoothlearn.attacks.attack_certified_regions`, must be 0), and the
seconds spent certifying and attacking at the radii.

``--results-file benchmarks/results/digits.json`` writes the table into the
digits results file as ``--results-table`` (default ``attack_<first>_<last>``,
the test inputs attacked), with the command, commit, machine and date, keeping
the file's other tables (``benchmarks/_results.py``). One run is one table:
its seconds and its provenance are that run's.

    python benchmarks/bench_attack.py [--n-test 200] [--first 0] [--n 10000]
        [--radii 0.25 0.5] [--strategies cohen ancer] [--steps 20] [--restarts 1]
"""

import argparse
import platform
import time
from pathlib import Path

import torch
from _results import add_arguments, record_table, run_record

from smoothlearn import SmoothedClassifier
from smoothlearn.attacks import attack_certified_regions, smoothed_pgd_attack
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy, certified_accuracy_interval


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument(
        "--first", type=int, default=0, help="index of the first test input (0)"
    )
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--radii", type=float, nargs="+", default=[0.25, 0.5])
    parser.add_argument("--strategies", nargs="+", default=["cohen", "ancer"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--draws", type=int, default=16)
    parser.add_argument("--restarts", type=int, default=1)
    add_arguments(
        parser,
        None,
        "benchmarks/results/digits.json",
        default_name="attack_<first>_<last>",
    )
    args = parser.parse_args()
    if args.results_file and Path(args.results_file).name != "digits.json":
        parser.error(
            f"--results-file: digits' file is digits.json, not {args.results_file}"
        )
    record = run_record()
    data = load_dataset("digits")
    rows = slice(args.first, args.first + args.n_test)
    X, y = data.X_test[rows], data.y_test[rows]
    if len(X) == 0:
        parser.error(f"--first {args.first}: digits has {len(data.X_test)} test inputs")
    name = args.results_table or f"attack_{args.first}_{args.first + len(X) - 1}"
    start = time.perf_counter()
    clf = SmoothedClassifier(
        sigma=args.sigma, max_epochs=args.epochs, n=args.n, random_state=0
    ).fit(data.X_train, data.y_train)
    print(
        f"digits: test inputs {args.first} to {args.first + len(X) - 1}, "
        "built-in MLP trained in "
        f"{time.perf_counter() - start:.1f} s; sigma={args.sigma} n={args.n} "
        f"alpha={clf.alpha}; attack: {args.steps} steps, {args.draws} draws per "
        f"step, {args.restarts} restart(s), PREDICT on n draws; "
        f"{platform.processor() or platform.machine()}, "
        f"torch threads {torch.get_num_threads()}"
    )
    header = (
        f"{'strategy':<9}{'radius':>7}{'certified':>19}{'attacked':>10}"
        f"{'cert. but wrong':>17}{'flips':>7}{'region flips':>14}{'cert s':>8}"
        f"{'attack s':>10}{'region s':>10}"
    )
    print(header)
    table = []
    for strategy in args.strategies:
        clf.set_params(strategy=strategy)
        start = time.perf_counter()
        cert = clf.certify(X)
        certify_seconds = time.perf_counter() - start
        start = time.perf_counter()
        results = smoothed_pgd_attack(
            clf,
            X,
            y,
            args.radii,
            n_steps=args.steps,
            n_draws=args.draws,
            n_restarts=args.restarts,
            random_state=0,
        )
        attack_seconds = time.perf_counter() - start
        # the whole of each region, not only its inscribed ball
        region = attack_certified_regions(
            clf,
            X,
            cert,
            n_steps=args.steps,
            n_draws=args.draws,
            n_restarts=args.restarts,
            random_state=0,
        )
        region_flips = int(region.flips_inside(cert).sum())
        region_seconds = time.perf_counter() - start - attack_seconds
        for result in results:
            r = result.radius
            certified = ~cert.abstained & (cert.label == y) & (cert.radius >= r)
            interval = certified_accuracy_interval(y, cert, r)
            wrong = int((certified & ~result.robust).sum())
            flips = int(result.flips_inside(cert).sum())
            ca = certified_accuracy(y, cert, r)
            print(
                f"{strategy:<9}{r:>7g}{100 * ca:>7.1f} [{100 * interval.low:4.1f},"
                f"{100 * interval.high:5.1f}]{100 * result.accuracy:>10.1f}"
                f"{wrong:>17d}{flips:>7d}{region_flips:>14d}{certify_seconds:>8.1f}"
                f"{attack_seconds:>10.1f}{region_seconds:>10.1f}"
            )
            if result.accuracy < ca or flips or region_flips:
                print("  ^ empirical below certified, or a flip inside a region")
            table.append(
                {
                    "case": f"{strategy}, {r:g}",
                    "certified": float(ca),
                    "certified_low": float(interval.low),
                    "certified_high": float(interval.high),
                    "attacked": float(result.accuracy),
                    "certified_but_wrong": wrong,
                    "flips": flips,
                    "region_flips": region_flips,
                    "certify_seconds": certify_seconds,
                    "attack_seconds": attack_seconds,
                    "region_seconds": region_seconds,
                }
            )
    print(
        "certified: % certified at the radius, with its 95% Clopper-Pearson "
        "interval over the test set; attacked: empirical robust accuracy (%)"
    )
    if args.results_file:
        settings = {
            "dataset": "digits",
            "first_input": args.first,
            "inputs": len(X),
            "train_inputs": len(data.X_train),
            "model": "built-in MLP (256, 256), gaussian noise augmentation",
            "epochs": args.epochs,
            "n": args.n,
            "sigma": args.sigma,
            "alpha": clf.alpha,
            "memory": str(clf.memory),
            "radii": args.radii,
            "strategies": args.strategies,
            "steps": args.steps,
            "draws_per_step": args.draws,
            "restarts": args.restarts,
            "interval": "Clopper-Pearson 95% over the test inputs",
        }
        record_table(
            args.results_file,
            name,
            columns=COLUMNS,
            rows=table,
            settings=settings,
            record=record,
        )
        print(f"wrote table {name!r} of {args.results_file}")


#: The table's columns in a results file (``benchmarks/_results.py``); the
#: first names a row (strategy and radius together). Seconds are per
#: strategy: certifying the inputs, attacking them at every radius, and
#: attacking each certified region.
COLUMNS = [
    {"key": "case", "label": "strategy, radius"},
    {"key": "certified", "label": "certified", "format": ".1%"},
    {"key": "certified_low", "label": "95% low", "format": ".1%"},
    {"key": "certified_high", "label": "95% high", "format": ".1%"},
    {"key": "attacked", "label": "attacked", "format": ".1%"},
    {"key": "certified_but_wrong", "label": "cert. but wrong", "format": "d"},
    {"key": "flips", "label": "flips", "format": "d"},
    {"key": "region_flips", "label": "region flips", "format": "d"},
    {"key": "certify_seconds", "label": "cert s", "format": ".1f"},
    {"key": "attack_seconds", "label": "attack s", "format": ".1f"},
    {"key": "region_seconds", "label": "region s", "format": ".1f"},
]


if __name__ == "__main__":
    main()
