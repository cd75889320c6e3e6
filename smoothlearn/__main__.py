"""The ``smoothlearn`` command line: train or load a model, certify, report.

``smoothlearn certify`` with no arguments trains the built-in MLP on
scikit-learn's digits and certifies 200 held-out inputs with Cohen smoothing,
writing a TSV log per strategy, a summary table and a certified-accuracy plot.
``smoothlearn compare`` certifies the same trained network with several
strategies and prints the paper-style table; ``smoothlearn report DIR``
re-renders a finished run's table and plot from its TSV logs.
"""

import os
import sys
import time

from ._cli_models import fit_or_load, save_memories, tell
from ._cli_options import build_parser

__all__ = ["main", "build_parser"]


#: What a run writes to --out (the files that mark a folder as a run's).
_RESULT_FILES = (
    "summary.txt",
    "certified_accuracy.png",
    "certify_*.jsonl",
    "certify_*.tsv",
    "model*.joblib",
)


def _earlier_results(folder):
    """The files of an earlier run in ``folder`` (none if it is not there)."""
    import glob

    return sorted(
        path
        for pattern in _RESULT_FILES
        for path in glob.glob(os.path.join(glob.escape(folder), pattern))
    )


def _claim_results_folder(args):
    """Make ``args.out`` a folder this run may write to, never losing a result.

    ``--resume`` continues the run in ``--out``; ``--overwrite`` removes an
    earlier run's files there; otherwise a folder holding an earlier run is
    left as it is and this run writes beside it, to the first free
    ``<out>-2``, ``<out>-3`` ..., saying so (on stderr, even with ``-q``).
    """
    # a model the command reads or saves stays, wherever it is
    named = {os.path.abspath(p) for p in (args.model, args.save_model) if p is not None}
    earlier = [p for p in _earlier_results(args.out) if os.path.abspath(p) not in named]
    if earlier and not args.resume:
        if args.overwrite:
            for path in earlier:
                os.remove(path)
        else:
            base, number = args.out.rstrip(os.sep) or args.out, 2
            while _earlier_results(f"{base}-{number}"):
                number += 1
            print(
                f"smoothlearn: {args.out} holds an earlier run's results; writing "
                f"to {base}-{number} instead (--overwrite replaces them, --resume "
                "continues that run)",
                file=sys.stderr,
                flush=True,
            )
            args.out = f"{base}-{number}"
    os.makedirs(args.out, exist_ok=True)


def _standardized(args, data):
    """``(data, scaler, X_test_raw)``: with ``--standardize``, the data
    standardised by a StandardScaler fitted on the training inputs the model
    trains on (refitted the same way for a ``--model`` trained so), the
    scaler and the raw test inputs; else the data as it is and None twice."""
    if not args.standardize:
        return data, None, None
    if args.images:
        raise ValueError(
            "--standardize is for flat features; pixels are already scaled by a "
            "constant (to [0, 1])"
        )
    import numpy as np
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(data.X_train[: args.n_train])
    X_raw = data.X_test[: args.n_test]
    data = type(data)(
        data.name,
        scaler.transform(data.X_train).astype(np.float32),
        data.y_train,
        scaler.transform(data.X_test).astype(np.float32),
        data.y_test,
        data.image_shape,
    )
    return data, scaler, X_raw


def _in_input_units(cert, scaler, X_raw):
    """The certificates of standardised inputs in the data's units (the
    preimage under the scaler, as :func:`~smoothlearn.certify_estimator`
    maps them), with its warning where those units shrink the radius."""
    import warnings

    import numpy as np

    from .pipeline import _warn_if_units_shrink

    a = 1.0 / np.asarray(scaler.scale_, dtype=np.float64)
    X_flat = np.asarray(X_raw, dtype=np.float64).reshape(len(cert), -1)
    in_input = cert._replace(input_map=a, input_center=X_flat, space="input")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _warn_if_units_shrink(cert, in_input, a, [scaler], X_raw, "--space model")
    for warning in caught:  # a line of the command's, not a Python warning
        print(f"smoothlearn: warning: {warning.message}", file=sys.stderr)
    return in_input


def run(args):
    """Carry out a parsed ``certify`` or ``compare`` command; return the table."""
    from .datasets import load_dataset
    from .metrics import write_certificates_tsv
    from .strategies import get_strategy

    data = load_dataset(args.data, random_state=args.random_state)
    if args.images:
        data = data.as_images()
    data, scaler, X_raw = _standardized(args, data)
    _claim_results_folder(args)
    strategies = args.strategy
    if strategies is None:
        # the defaults that can smooth these inputs with this noise
        # (ucan_pattern needs images, rancer and rddrs gaussian noise)
        from .noise import get_noise

        strategies = []
        for name in args.default_strategies:
            try:
                get_strategy(name).check(
                    get_noise(args.noise), tuple(data.X_train.shape[1:])
                )
            except ValueError as exc:
                tell(args, f"skipping {name}: {exc}")
            else:
                strategies.append(name)
    # UCAN's generators train with their network: each gets its own model
    trained = {s for s in strategies if get_strategy(s).trained_in_fit}
    shared = [s for s in strategies if s not in trained]
    shared_clf, shared_files = (
        fit_or_load(args, data, shared[0]) if shared else (None, [])
    )
    X, y = data.X_test[: args.n_test], data.y_test[: args.n_test]
    results, attacks = {}, {}
    for strategy in strategies:
        clf, files = shared_clf, shared_files
        if strategy in trained:
            tell(args, f"{strategy} trains its noise generator with its own network")
            clf, files = fit_or_load(args, data, strategy, own_network=True)
        smoothing = get_strategy(strategy)
        if "rank" in smoothing.get_params():
            smoothing.set_params(rank=None if args.rank == "dense" else args.rank)
        clf.set_params(
            strategy=smoothing,
            n0=args.n0,
            n=args.n,
            radius_tolerance=args.radius_tolerance,
            alpha=args.alpha,
            batch_size=args.batch_size,
            random_state=args.random_state,
            n_jobs=args.n_jobs,
            precision=args.precision,
            compile=args.compile,
            **({} if args.grid is None else {"grid": args.grid}),
            verbose=0 if args.quiet else 1,
        )
        log = os.path.join(args.out, f"certify_{strategy}.jsonl")
        if not args.resume and os.path.exists(log):
            os.remove(log)
        tell(args, f"certifying {len(X)} inputs with {strategy} (n={args.n}) ...")
        start = time.perf_counter()
        cert = clf.certify(X, checkpoint=log)
        if scaler is not None:  # the network's certificates are the model's
            if args.space == "input":
                cert = _in_input_units(cert, scaler, X_raw)
            else:
                cert = cert._replace(space="model")
        tell(args, f"{strategy}: {time.perf_counter() - start:.1f} s")
        save_memories(args, clf, files)
        write_certificates_tsv(
            os.path.join(args.out, f"certify_{strategy}.tsv"), cert, y
        )
        results[strategy] = cert
        if args.attack:
            attacks[strategy] = _attack(args, clf, X, y, scaler, X_raw)
    denoiser = clf.denoiser_
    header = (
        f"data={data.name} n_test={len(X)} noise={clf.noise_.name} "
        f"sigma={clf.sigma} n={args.n} alpha={args.alpha}"
        + ("" if clf._grid() is None else f" grid={clf._grid().step:.6g}")
        + ("" if denoiser is None else f" denoiser={type(denoiser).__name__}")
        + ("" if scaler is None else f" standardize=1 space={args.space}")
        + (
            f" timestep={denoiser.timestep(clf.sigma)}"
            if hasattr(denoiser, "timestep")
            else ""
        )
        + (
            ""
            if args.radius_tolerance is None
            else f" radius_tolerance={args.radius_tolerance}"
        )
    )
    smoothings = {name: cert.smoothing for name, cert in results.items()}
    table = _summarise(args, header, clf.noise_.norm, y, results, smoothings)
    if attacks:
        _summarise_attacks(args, y, results, attacks)
    return table


#: The command line's attack: few steps and draws (an estimate for a table),
#: PREDICT on at most this many draws at each point.
ATTACK_STEPS, ATTACK_DRAWS, ATTACK_PREDICT = 20, 16, 10_000


def _attack(args, clf, X, y, scaler=None, X_raw=None):
    """PGD on ``clf``'s smoothed soft classifier at ``args.radii``: behind
    ``--standardize``, in the units the certificates are in (``--space``)."""
    from .attacks import smoothed_pgd_attack

    tell(args, f"attacking {len(X)} inputs at radii {list(args.radii)} ...")
    start = time.perf_counter()
    if scaler is not None and args.space == "input":
        from sklearn.pipeline import make_pipeline

        clf, X = make_pipeline(scaler, clf), X_raw
    results = smoothed_pgd_attack(
        clf,
        X,
        y,
        list(args.radii),
        n_steps=ATTACK_STEPS,
        n_draws=ATTACK_DRAWS,
        n_predict=min(args.n, ATTACK_PREDICT),
        random_state=args.random_state,
    )
    tell(args, f"attack: {time.perf_counter() - start:.1f} s")
    return results


def _summarise_attacks(args, y, results, attacks):
    """Print and save (attack.txt) empirical robust accuracy beside certified."""
    from .metrics import certified_accuracy

    radii = list(args.radii)
    norm = next(iter(attacks.values()))[0].norm
    header = ["strategy"] + [f"R={r:g}" for r in radii] + ["flips"]
    rows = []
    for name, found in attacks.items():
        cert = results[name]
        flips = sum(int(a.flips_inside(cert).sum()) for a in found)
        certified = certified_accuracy(y, cert, radii)
        rows.append([f"{name} certified"] + [f"{100 * a:.1f}" for a in certified])
        rows.append(
            [f"{name} attacked"]
            + [f"{100 * a.accuracy:.1f}" for a in found]
            + [str(flips)]
        )
    widths = [
        max(len(r[j]) for r in [header, *rows] if j < len(r))
        for j in range(len(header))
    ]
    lines = [
        "  ".join(
            [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        ).rstrip()
        for r in [header, *rows]
    ]
    caption = (
        f"empirical robust accuracy (%) at {norm} radius R: PGD on the smoothed "
        f"soft classifier ({ATTACK_STEPS} steps, {ATTACK_DRAWS} noise draws per "
        f"step, PREDICT on {min(args.n, ATTACK_PREDICT)} draws at alpha="
        f"{args.alpha}): an upper bound of the accuracy under attack, where "
        "certified accuracy is a lower one; flips: predictions the attack "
        "changed inside a certified region (0 for sound certificates)"
    )
    text = "\n".join([caption, *lines])
    with open(os.path.join(args.out, "attack.txt"), "w") as handle:
        handle.write(text + "\n")
    print()
    print(text)


def _settings(header):
    """The ``key=value`` settings of a run's first line (data, noise, sigma ...)."""
    return dict(part.split("=", 1) for part in header.split() if "=" in part)


def _summarise(args, header, norm, y, results, smoothings):
    """Print and save the captioned table and plot; return the table.

    ``smoothings`` maps each row's name to its smoothing written whole, listed
    under the table so that two runs' rows are told apart. Where ``header``
    gives the noise, sigma, n and alpha, the caption and the plot state the
    largest radius certifiable at them.
    """
    from .bounds import largest_certifiable_radius
    from .metrics import (
        CertifiedAccuracyDisplay,
        certified_accuracy_caption,
        certified_accuracy_table,
    )

    settings = _settings(header)
    max_radius = None
    # in the data's units behind --standardize the limit is the scaler's too
    in_model_units = settings.get("space", "model") == "model"
    if {"noise", "sigma", "n", "alpha"} <= set(settings) and in_model_units:
        max_radius = largest_certifiable_radius(
            settings["noise"],
            float(settings["sigma"]),
            int(settings["n"]),
            float(settings["alpha"]),
        )
    table = certified_accuracy_table(y, results, args.radii)
    described = [f"  {name}: {smoothing}" for name, smoothing in smoothings.items()]
    caption = certified_accuracy_caption(norm, max_radius=max_radius)
    text = "\n".join([header, caption, table, "", "smoothings:", *described])
    with open(os.path.join(args.out, "summary.txt"), "w") as handle:
        handle.write(text + "\n")
    if not args.no_plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
        except ImportError:
            tell(args, "matplotlib is not installed: no plot (pip install matplotlib)")
        else:
            title = ", ".join(
                f"{key}={settings[key]}"
                for key in ("data", "noise", "sigma", "n", "alpha")
                if key in settings
            )
            display = CertifiedAccuracyDisplay.from_certificates(
                y,
                results,
                caption=f"{title}, {norm} norm" if title else f"{norm} norm",
                max_radius=max_radius,
                norm=norm,
            )
            display.figure_.savefig(
                os.path.join(args.out, "certified_accuracy.png"), bbox_inches="tight"
            )
    print(text)
    return table


def report(args):
    """Re-render a finished run's table and plot from its TSV logs."""
    import glob

    import numpy as np

    from .metrics import read_certificates_tsv

    args.out = args.dir
    paths = sorted(glob.glob(os.path.join(args.dir, "certify_*.tsv")))
    if not paths:
        raise ValueError(f"{args.dir} holds no certify_<strategy>.tsv logs")
    results = {}
    for path in paths:
        name = os.path.basename(path)[len("certify_") : -len(".tsv")]
        results[name] = read_certificates_tsv(path)
    y = next(iter(results.values())).y_true
    for name, log in results.items():
        if not np.array_equal(log.y_true.astype(str), y.astype(str)):
            raise ValueError(f"certify_{name}.tsv certifies other inputs than the rest")
    # the run's own first line (data, noise, sigma ...) where summary.txt has it
    header, norm = f"logs in {args.dir}", "l2"
    summary = os.path.join(args.dir, "summary.txt")
    if os.path.exists(summary):
        with open(summary) as handle:
            header = handle.readline().rstrip("\n")
        noise = _settings(header).get("noise")
        norm = {"uniform": "l1", "laplace": "l1"}.get(noise, "l2")
    # the smoothing each log records ('' for logs written before it did)
    smoothings = {
        name: log.smoothing[0] if len(log) else "" for name, log in results.items()
    }
    return _summarise(args, header, norm, y, results, smoothings)


def _resume_command(argv, out):
    """The command line that continues an interrupted run in ``out``."""
    import shlex

    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not (arg.startswith("--out=") or arg in ("--overwrite", "--resume")):
            kept.append(arg)
    return shlex.join(["smoothlearn", *kept, "--out", out, "--resume"])


def main(argv=None):
    """Entry point of the ``smoothlearn`` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (
        argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")
    ):
        argv = ["certify", *argv]  # certify is the default command
    args = parser.parse_args(argv)
    try:
        if args.command == "report":
            report(args)
        else:
            run(args)
    except (ValueError, TypeError, OSError) as exc:
        print(f"smoothlearn: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("smoothlearn: interrupted", file=sys.stderr)
        if args.command != "report" and os.path.isdir(args.out):
            print(
                "the inputs certified so far are kept; continue the run with\n  "
                + _resume_command(argv, args.out),
                file=sys.stderr,
            )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
