"""ANCER: smoothlearn against the authors' package, ancer-python, side by side.

The same trained network (the built-in CNN, trained under noise at
``--sigma``) and the same inputs are certified by ANCER twice, interleaved
per round:

* ancer-python 1.0.0 as its README runs it: isotropic data-dependent
  smoothing (``ddsmoothing.optimize_isotropic_dds``), then
  ``ancer.optimize_ancer`` on a batch of inputs, then Cohen et al.'s
  certification per input with the optimised scales (``ddsmoothing.Smooth``);
  no memory (its certificates are not sound without one);
* smoothlearn's ``strategy="ancer"`` with the same settings (100 steps of
  each optimisation at learning rate 0.04 on 100 draws, kappa 2, fixed steps:
  ``tol=None``), and at its defaults (steps stop when the objective stops
  rising; the optimised scale is compared with its start on 4,000 fresh
  draws), memory included.

Both use n0 = 100 selection and ``--n`` estimation draws, alpha = 0.001 and
``--batch-size`` noisy inputs per forward pass. Printed: seconds per input of
each (median of ``--repeats`` rounds), the ratio, and each run's AC R~ (the
proxy radius where certified correctly) as a check that both ran ANCER.

Install the peers apart, without their dependencies (they pull
torchvision, which does not import beside torch 2.13; the modules used here
do not import it): ``pip install --no-deps ancer-python==1.0.0
ddsmoothing-python==1.0.0`` and ``pip install ".[bench]"`` (statsmodels).
ddsmoothing imports ``scipy.stats.binom_test``, which SciPy 1.12 removed; it
is given ``binomtest``'s p-value under that name here (PREDICT only, not
used by certification).

    python benchmarks/bench_ancer_python.py --inputs 16 --n 10000
    python benchmarks/bench_ancer_python.py --inputs 16 --device cuda --batch-size 10000
    python benchmarks/bench_ancer_python.py \
        --dataset /usr/share/datasets/fashion-mnist --train 12000 --epochs 5 --inputs 8

``--clock cpu`` times by this process's CPU time (for a shared machine; the
peers run in this process). ``--results-file benchmarks/results/<dataset>.json``
writes the table into that data set's results file as ``--results-table``
(default ``ancer_python``), with the command, commit and machine
(``benchmarks/_results.py``).
"""

import argparse
import statistics

import numpy as np
import scipy.stats
import torch
from _results import add_arguments, run_record, write_table
from _timing import CLOCKS
from bench_quality import load
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.strategies import ANCER, IsotropicDD, _starts


def _peers():
    if not hasattr(scipy.stats, "binom_test"):
        scipy.stats.binom_test = lambda k, n, p=0.5: (
            scipy.stats.binomtest(int(k), int(n), p).pvalue
        )
    import ancer
    import ddsmoothing
    import ddsmoothing.certificate
    import ddsmoothing.smooth

    return ancer, ddsmoothing


def ancer_python(net, X, sigma, n, batch_size, kappa=2.0, device="cpu"):
    """ancer-python's pipeline on inputs ``X`` (m, C, H, W): per input, the
    label (-1 where abstained) and the proxy radius."""
    ancer, ddsmoothing = _peers()
    model = nn.Sequential(
        net, nn.Softmax(dim=1)
    ).eval()  # it optimises on probabilities
    batch = torch.as_tensor(X, device=device)
    certificate = ddsmoothing.certificate.L2Certificate(len(X), device=device)
    sig0 = torch.full((len(X),), sigma, device=device)
    iso = ddsmoothing.optimize_isotropic_dds(
        model, batch, certificate, 0.04, sig0, 100, 100, device=device
    )
    theta0 = iso.reshape(-1, 1, 1, 1).repeat(1, *X.shape[1:]).detach()
    theta = ancer.optimize_ancer(
        model, batch, certificate, 0.04, theta0, 100, 100, kappa, device=device
    ).detach()
    n_classes = model(batch[:1]).shape[1]
    labels, proxy = [], []
    for i in range(len(X)):
        smooth = ddsmoothing.smooth.Smooth(model, n_classes, theta[i], certificate)
        label, gap = smooth.certify(batch[i], 100, n, 0.001, batch_size, device=device)
        labels.append(label)
        geometric_mean = float(torch.exp(torch.log(theta[i]).mean()))
        proxy.append(gap * geometric_mean if label != -1 else 0.0)
    return np.array(labels), np.array(proxy)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--train", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    add_arguments(parser, "ancer_python", "benchmarks/results/<dataset>.json")
    args = parser.parse_args()
    record = run_record(args.device)
    now = CLOCKS[args.clock]
    torch.manual_seed(0)
    X_train, y_train, X_test, y_test = load(args.dataset, images=True)
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    clf = SmoothedClassifier(
        sigma=args.sigma,
        n=args.n,
        batch_size=args.batch_size,
        max_epochs=args.epochs,
        device=args.device,
        random_state=0,
    ).fit(X_train[: args.train], y_train[: args.train])
    net = clf.net_.module_
    paper = {"n_iter": 100, "lr": 0.04, "n_draws": 100, "tol": None}
    runs = {
        "ancer-python 1.0.0": lambda: ancer_python(
            net, X, args.sigma, args.n, args.batch_size, device=args.device
        ),
        "smoothlearn, same settings": lambda: _smoothlearn(
            clf, ANCER(kappa=2.0, isotropic=IsotropicDD(**paper), **paper), X
        ),
        "smoothlearn, defaults": lambda: _smoothlearn(clf, ANCER(), X),
    }
    seconds = {name: [] for name in runs}
    results = {}
    for _ in range(args.repeats):
        for name, run in runs.items():
            start = now()
            results[name] = run()
            seconds[name].append((now() - start) / len(X))
    print(
        f"{args.dataset}: built-in CNN, {len(X)} inputs, n0=100, n={args.n}, "
        f"sigma={args.sigma}, batch {args.batch_size}, {args.device} "
        f"({torch.get_num_threads()} threads); median of {args.repeats}"
    )
    base = statistics.median(seconds["ancer-python 1.0.0"])
    rows = []
    for name, (labels, proxy) in results.items():
        median = statistics.median(seconds[name])
        acr = np.where(labels == y, proxy, 0.0).mean()
        print(
            f"{name:<28} {median:8.3f} s/input  {base / median:5.2f}x faster "
            f"than ancer-python  AC R~ {acr:.3f}"
        )
        rows.append(
            {
                "run": name,
                "seconds": median,
                "faster": base / median,
                "acr_proxy": float(acr),
            }
        )
    if args.results_file:
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            settings={
                "dataset": args.dataset,
                "network": "built-in CNN",
                "train_inputs": len(X_train[: args.train]),
                "epochs": args.epochs,
                "inputs": len(X),
                "n0": 100,
                "n": args.n,
                "alpha": 0.001,
                "sigma": args.sigma,
                "batch_size": args.batch_size,
                "device": args.device,
                "repeats": args.repeats,
                "clock": args.clock,
                "statistic": "median",
                "ancer_settings": "100 steps, lr 0.04, 100 draws, kappa 2",
            },
            record=record,
        )


#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "run", "label": "run"},
    {"key": "seconds", "label": "s/input", "format": ".3f"},
    {"key": "faster", "label": "faster than ancer-python", "format": ".2fx"},
    {"key": "acr_proxy", "label": "AC R~", "format": ".3"},
]


def _smoothlearn(clf, strategy, X):
    # each round from scratch, as ancer-python runs: a fresh memory, and no
    # isotropic start kept from the last round (smoothlearn keeps a block's
    # start once per process, which would make later rounds cheaper)
    clf.set_params(strategy=strategy)
    clf.memories_ = {}
    with _starts._lock:
        _starts._starts.clear()
    cert = clf.certify(X)
    labels = np.where(cert.abstained, -1, cert.label)
    return labels, cert.proxy_radius


if __name__ == "__main__":
    main()
