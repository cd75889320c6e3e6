"""The ``smoothlearn`` command line: train or load a model, certify, report.

``smoothlearn certify`` with no arguments trains the built-in MLP on
scikit-learn's digits and certifies 200 held-out inputs with Cohen smoothing,
writing a TSV log per strategy, a summary table and a certified-accuracy plot.
``smoothlearn compare`` certifies the same trained network with several
strategies and prints the paper-style table; ``smoothlearn report DIR``
re-renders a finished run's table and plot from its TSV logs.
"""

import argparse
import os
import sys
import time

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _probability(text):
    value = float(text)
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"must lie in (0, 0.5), got {text}")
    return value


def _fraction(text):
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1), got {text}")
    return value


def _rank(text):
    if text in ("auto", "dense"):
        return text
    return _positive_int(text)


def _hidden(text):
    try:
        units = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated layer widths, got {text!r}"
        ) from None
    if not units or min(units) <= 0:
        raise argparse.ArgumentTypeError(f"must be positive widths, got {text!r}")
    return units


def _grid_step(text):
    """``--grid``: 'auto', a step, or a fraction such as 1/255."""
    if text == "auto":
        return text
    try:
        num, _, den = text.partition("/")
        step = float(num) / float(den) if den else float(num)
    except (ValueError, ZeroDivisionError):
        step = float("nan")
    if not (step > 0 and step < float("inf")):
        raise argparse.ArgumentTypeError(
            f"must be 'auto' or a step > 0 such as 1/255; got {text!r}"
        )
    return step


def _add_radii(parser):
    parser.add_argument(
        "--radii",
        type=float,
        nargs="+",
        default=[0.0, 0.25, 0.5, 0.75, 1.0],
        help="radii of the summary table",
    )


def _add_common(parser, default_strategies):
    from .noise import NOISES
    from .strategies import STRATEGIES
    from .training import TRAININGS

    data = parser.add_argument_group("data")
    data.add_argument(
        "--data",
        default="digits",
        help="'digits' (default), an .npz with X and y (optionally X_test, y_test), "
        "or a folder of MNIST-format idx files, e.g. /usr/share/datasets/fashion-mnist",
    )
    data.add_argument(
        "--images",
        action="store_true",
        help="feed inputs shaped (C, H, W) (the built-in CNN) instead of flat vectors",
    )
    data.add_argument(
        "--standardize",
        action="store_true",
        help="standardise flat features (scikit-learn's StandardScaler, fitted on "
        "the training inputs) before the network: for tabular data whose features "
        "have units of different sizes; see --space",
    )
    data.add_argument(
        "--n-train", type=_positive_int, help="train on the first N training inputs"
    )
    data.add_argument(
        "--n-test",
        type=_positive_int,
        default=200,
        help="certify the first N test inputs (default 200)",
    )

    model = parser.add_argument_group("model and training")
    model.add_argument(
        "--model",
        help="load a fitted SmoothedClassifier (joblib) instead of training; the "
        "file is updated with the memory of data-dependent strategies after each "
        "certification, so that later runs stay sound. With --denoiser: the "
        "pretrained network to certify, used frozen (a torch module saved with "
        "torch.save, or a SmoothedClassifier's file, whose network is taken)",
    )
    model.add_argument(
        "--denoiser",
        choices=["auto", "diffusion"],
        help="denoised smoothing: train the built-in denoiser in front of the "
        "frozen, pretrained network --model names and certify the two together "
        "(auto), or put one step of the diffusion model --diffusion-model names "
        "there, trained by no one here (diffusion)",
    )
    model.add_argument(
        "--diffusion-model",
        help="with --denoiser diffusion: a diffusers folder saved with "
        "save_pretrained (unet/ and scheduler/, as a DDPMPipeline saves them; "
        "inputs in [0, 1]), or a smoothlearn DiffusionDenoiser saved with "
        "torch.save (any data range); read locally, nothing is downloaded",
    )
    model.add_argument(
        "--training",
        choices=sorted(TRAININGS),
        help="how the network (or, with --denoiser, the denoiser) is trained "
        "(default: gaussian; stability with --denoiser)",
    )
    model.add_argument(
        "--save-model",
        help="save the fitted SmoothedClassifier here (with its memory, after each "
        "certification)",
    )
    model.add_argument(
        "--noise", choices=sorted(NOISES), default="gaussian", help="noise family"
    )
    model.add_argument(
        "--sigma", type=_positive_float, default=0.25, help="noise level (0.25)"
    )
    model.add_argument(
        "--grid",
        type=_grid_step,
        help="smooth on the inputs' grid, sound in floating point: its step "
        "(1/16 for digits, 1/255 for 8-bit images) or 'auto' (default: float noise)",
    )
    model.add_argument(
        "--max-epochs", type=int, default=20, help="training epochs (20)"
    )
    model.add_argument("--lr", type=_positive_float, default=1e-3, help="learning rate")
    model.add_argument("--hidden", type=_hidden, help="MLP layer widths, e.g. 256,256")
    model.add_argument("--device", default="cpu", help="torch device (cpu)")

    cert = parser.add_argument_group("certification")
    cert.add_argument(
        "--strategy",
        nargs="+",
        choices=sorted(STRATEGIES),
        default=None,
        help=f"strategies to certify with (default: {' '.join(default_strategies)}"
        + (", those that fit the data" if len(default_strategies) > 1 else "")
        + ")",
    )
    cert.add_argument(
        "--rank",
        type=_rank,
        default="auto",
        help="directions of rancer's and rddrs's rotated scales: 'auto' (dense up "
        "to 256 input features, classes - 1 above), 'dense', or a number",
    )
    cert.add_argument(
        "--n0", type=_positive_int, default=100, help="selection draws (100)"
    )
    cert.add_argument(
        "--n", type=_positive_int, default=100_000, help="estimation draws (100000)"
    )
    cert.add_argument(
        "--radius-tolerance",
        type=_fraction,
        default=None,
        help="input-specific sample sizes: each input takes the fewest estimation "
        "draws (at most --n) whose expected radius is within this fraction of "
        "--n's, e.g. 0.01 (default: --n for every input)",
    )
    cert.add_argument(
        "--alpha", type=_probability, default=0.001, help="failure probability (0.001)"
    )
    cert.add_argument(
        "--space",
        choices=["input", "model"],
        default="input",
        help="units of the certificates with --standardize: the data's (input, "
        "the default) or the standardised ones the network sees (model); without "
        "--standardize the two are the same",
    )
    cert.add_argument(
        "--batch-size",
        type=_positive_int,
        default=1000,
        help="noisy inputs per forward pass (1000)",
    )
    _add_radii(cert)
    cert.add_argument(
        "--random-state", type=int, default=0, help="seed of training and noise (0)"
    )
    cert.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="the network's precision when certifying (fp32); part of the "
        "smoothing, as sound as fp32",
    )
    cert.add_argument(
        "--compile",
        action="store_true",
        help="certify through torch.compile of the network (for GPUs)",
    )
    cert.add_argument(
        "--n-jobs",
        type=int,
        default=1,
        help="parallel workers over blocks of inputs (-1: all cores); results "
        "do not depend on it",
    )
    cert.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in --out: reuse the model it started "
        "from (model_at_start.joblib) and the finished inputs of its "
        "certify_<strategy>.jsonl logs",
    )
    cert.add_argument(
        "--attack",
        action="store_true",
        help="also attack each strategy's smoothed classifier at --radii (PGD "
        "on its soft output, SmoothAdv-style: smoothlearn.attacks) and print "
        "its empirical robust accuracy beside certified accuracy (attack.txt)",
    )

    out = parser.add_argument_group("output")
    out.add_argument(
        "--out",
        default="smoothlearn-results",
        help="folder for the TSV logs, summary.txt and the plot "
        "(default smoothlearn-results)",
    )
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results of an earlier run in --out (without it, a new "
        "run writes beside them, to the first free --out-2, --out-3 ..., and "
        "says where)",
    )
    out.add_argument("--no-plot", action="store_true", help="skip the plot")
    out.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def build_parser():
    """The argument parser of the ``smoothlearn`` command."""
    from . import __version__
    from .strategies import STRATEGIES

    parser = _Parser(
        prog="smoothlearn",
        description="Certify neural-network classifiers by randomized smoothing.",
    )
    parser.add_argument(
        "--version", action="version", version=f"smoothlearn {__version__}"
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    certify = sub.add_parser(
        "certify",
        help="train (or load) a model and certify a dataset",
        description="Train (or load) a smoothed classifier and certify held-out "
        "inputs; writes model.joblib (the model with the memory of "
        "data-dependent strategies, saved after each certification), "
        "certify_<strategy>.jsonl (each finished "
        "input, as it finishes), certify_<strategy>.tsv (Cohen's log format), "
        "summary.txt and certified_accuracy.png to --out. An interrupted run "
        "continues with --resume.",
    )
    _add_common(certify, ["cohen"])
    certify.set_defaults(default_strategies=["cohen"])
    compare = sub.add_parser(
        "compare",
        help="certify one trained network with several strategies",
        description="Certify the same trained network with several strategies and "
        "print the paper-style table (certified accuracy at radii, ACR, ACR~).",
    )
    # canonical names only (aliases such as 'fixed' dropped), in registry order
    distinct = [name for name, cls in STRATEGIES.items() if cls().name == name]
    _add_common(compare, distinct)
    compare.set_defaults(default_strategies=distinct)
    rerender = sub.add_parser(
        "report",
        help="re-render the table and plot of a finished run from its TSV logs",
        description="Read the certify_<strategy>.tsv logs in DIR and write its "
        "summary.txt and certified_accuracy.png again (e.g. at other radii).",
    )
    rerender.add_argument("dir", help="the --out folder of a finished run")
    _add_radii(rerender)
    rerender.add_argument("--no-plot", action="store_true", help="skip the plot")
    rerender.add_argument("-q", "--quiet", action="store_true", help="no messages")
    return parser


def _log(args, message):
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def _model_files(args, strategy, own_network):
    """``(at_start, current)`` model files in ``--out``.

    ``current`` is the model with its memories as after the last finished
    certification (what a later ``--model`` run continues); ``at_start`` the
    state this run began with (what ``--resume`` replays the logs from).
    """
    stem = f"model_{strategy}" if own_network else "model"
    return (
        os.path.join(args.out, f"{stem}_at_start.joblib"),
        os.path.join(args.out, f"{stem}.joblib"),
    )


def _fit_or_load(args, data, strategy, own_network=False):
    """The shared trained model, or (``own_network``) one trained with ``strategy``.

    Returns the classifier and the files to save it to after each
    certification: the memory is part of the fitted model, and a later run
    from any of them must continue it to stay sound.
    """
    import joblib

    at_start, current = _model_files(args, strategy, own_network)
    # with a denoiser, --model is the frozen network, not a model to update
    given = None if own_network or args.denoiser else args.model
    save_to = [current] + [p for p in (args.save_model, given) if p and not own_network]
    if args.resume and os.path.exists(at_start):
        # the state the interrupted run began with: replaying its logs through
        # these memories reproduces the uninterrupted run exactly (the
        # memories it finished are taken back from its files when saving)
        clf = _load_model(at_start)
        _log(args, f"resuming from {at_start}")
        return clf, save_to
    if given:
        clf = _load_model(given)
        _log(args, f"loaded {given}")
    else:
        clf = _train(args, data, strategy)
    # the memories the files already hold for this model are where it starts
    _save_memories(args, clf, save_to, quiet=True)
    joblib.dump(clf, at_start)
    return clf, save_to


def _load_model(path):
    import joblib

    from .estimators import SmoothedClassifier

    hint = " (a pretrained torch network is certified with --denoiser auto)"
    try:
        clf = joblib.load(path)
    except (OSError, EOFError):
        raise
    except Exception as exc:  # pickle's many ways of saying "not mine"
        raise ValueError(
            f"{path} is not a SmoothedClassifier saved with joblib ({exc}){hint}"
        ) from None
    if not isinstance(clf, SmoothedClassifier):
        raise ValueError(f"{path} does not hold a SmoothedClassifier{hint}")
    return clf


def _pretrained_network(args):
    """The frozen network of ``--denoiser``, from ``--model``."""
    import torch

    from .estimators import SmoothedClassifier

    if args.model is None:
        raise ValueError(
            "--denoiser certifies a network you already have: name it with --model "
            "(a torch module saved with torch.save(module, path))"
        )
    try:
        network = torch.load(args.model, map_location=args.device, weights_only=False)
    except Exception:  # not a torch file: a joblib one
        import joblib

        network = joblib.load(args.model)
    if isinstance(network, SmoothedClassifier):
        network = network.net_.module_
        network = getattr(network, "classifier", network)  # a denoised one's f
    if not isinstance(network, torch.nn.Module):
        raise ValueError(
            f"{args.model} holds no torch module (with --denoiser, --model names the "
            "pretrained network: torch.save(module, path))"
        )
    _log(args, f"loaded the network to certify from {args.model}")
    return network


def _diffusion_denoiser(args):
    """The ``DiffusionDenoiser`` that ``--diffusion-model`` names."""
    import torch

    from .denoisers import DiffusionDenoiser

    path = args.diffusion_model
    if path is None:
        raise ValueError(
            "--denoiser diffusion needs --diffusion-model: a diffusers folder "
            "(save_pretrained) or a DiffusionDenoiser saved with torch.save"
        )
    if os.path.isdir(path):
        try:
            from diffusers import DDPMScheduler, UNet2DModel
        except ImportError:
            raise ValueError(
                f"{path} is a diffusers folder: install diffusers "
                '(pip install "smoothlearn[diffusion]")'
            ) from None
        try:
            unet = UNet2DModel.from_pretrained(
                path, subfolder="unet", local_files_only=True
            )
            scheduler = DDPMScheduler.from_pretrained(
                path, subfolder="scheduler", local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"{path} holds no diffusers UNet2DModel and scheduler in unet/ and "
                f"scheduler/ ({exc})"
            ) from None
        denoiser = DiffusionDenoiser.from_diffusers(unet, scheduler)
    else:
        denoiser = torch.load(path, map_location=args.device, weights_only=False)
        if not isinstance(denoiser, DiffusionDenoiser):
            raise ValueError(
                f"{path} holds no DiffusionDenoiser (torch.save(DiffusionDenoiser"
                "(...), path)) and is not a diffusers folder"
            )
    _log(args, f"loaded the diffusion model from {path}")
    return denoiser


def _module_params(args):
    if args.hidden and not args.images:
        return {"module__hidden_units": args.hidden}
    return {}


def _train(args, data, strategy):
    from .estimators import SmoothedClassifier

    X, y = data.X_train, data.y_train
    if args.n_train:
        X, y = X[: args.n_train], y[: args.n_train]
    kwargs = _module_params(args)
    if args.denoiser:
        kwargs = {
            "module": _pretrained_network(args),
            "denoiser": (
                _diffusion_denoiser(args)
                if args.denoiser == "diffusion"
                else args.denoiser
            ),
        }
    clf = SmoothedClassifier(
        strategy=strategy,
        training=args.training or ("stability" if args.denoiser else "gaussian"),
        noise=args.noise,
        sigma=args.sigma,
        grid=args.grid,
        max_epochs=args.max_epochs,
        lr=args.lr,
        device=args.device,
        random_state=args.random_state,
        **kwargs,
    )
    what = "a denoiser in front of the frozen network on" if args.denoiser else "on"
    if args.denoiser == "diffusion":
        what = "nothing (a diffusion model in front of the frozen network) on"
    _log(args, f"training {what} {len(X)} inputs of shape {X.shape[1:]} ...")
    start = time.perf_counter()
    clf.fit(X, y)
    _log(args, f"trained in {time.perf_counter() - start:.1f} s")
    return clf


def _save_memories(args, clf, paths, quiet=False):
    """Save ``clf`` with its memories, never with fewer than a file holds.

    A file may hold the same fitted model with memories ``clf`` lacks or has
    fewer entries of: those an interrupted run finished (``--resume`` reloads
    the model the run started from and replays only the strategies it names),
    or another run's on the same ``--model``. Each file's memories are taken
    first (:func:`_take_memories`); then every file is written.
    """
    import joblib

    for path in paths:
        if os.path.exists(path):
            _take_memories(clf, _load_model(path), path)
    for path in paths:
        joblib.dump(clf, path)
    if not quiet:
        _log(args, f"saved the model with its memory to {', '.join(paths)}")


def _take_memories(clf, saved, path):
    """Give ``clf`` the memories ``saved`` (read from ``path``) holds beyond its own.

    Only for the same fitted model (the same network, noise generator and
    classes; another fit's memories constrain nothing). Per smoothing: a
    memory ``clf`` lacks is taken; one that continues ``clf``'s (the same
    entries, then more) replaces it; one that ``clf``'s continues is left.
    Two that both went on from a common start cannot be joined soundly (each
    run certified without the other's regions): a ValueError says what to do.
    """
    from ._checkpoint import network_digest

    def fit_of(model):
        generator = getattr(model, "noise_generator_", None)
        return (
            network_digest(model.net_.module_),
            None if generator is None else network_digest(generator),
            [str(c) for c in model.classes_],
        )

    if fit_of(saved) != fit_of(clf):
        return
    for smoothing, theirs in saved.memories_.items():
        mine = clf.memories_.get(smoothing)
        if mine is not None and mine._starts_with(theirs):
            continue
        if mine is not None and not theirs._starts_with(mine):
            raise ValueError(
                f"{path} holds a memory of {smoothing} that another run changed "
                "since this one started; certify again from that file "
                f"(--model {path}) so that one memory holds every answer"
            )
        clf.memories_[smoothing] = theirs
        if getattr(clf, "memory_", None) is mine and mine is not None:
            clf.memory_ = theirs


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
                _log(args, f"skipping {name}: {exc}")
            else:
                strategies.append(name)
    # UCAN's generators train with their network: each gets its own model
    trained = {s for s in strategies if get_strategy(s).trained_in_fit}
    shared = [s for s in strategies if s not in trained]
    shared_clf, shared_files = (
        _fit_or_load(args, data, shared[0]) if shared else (None, [])
    )
    X, y = data.X_test[: args.n_test], data.y_test[: args.n_test]
    results, attacks = {}, {}
    for strategy in strategies:
        clf, files = shared_clf, shared_files
        if strategy in trained:
            _log(args, f"{strategy} trains its noise generator with its own network")
            clf, files = _fit_or_load(args, data, strategy, own_network=True)
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
        _log(args, f"certifying {len(X)} inputs with {strategy} (n={args.n}) ...")
        start = time.perf_counter()
        cert = clf.certify(X, checkpoint=log)
        if scaler is not None:  # the network's certificates are the model's
            if args.space == "input":
                cert = _in_input_units(cert, scaler, X_raw)
            else:
                cert = cert._replace(space="model")
        _log(args, f"{strategy}: {time.perf_counter() - start:.1f} s")
        _save_memories(args, clf, files)
        write_certificates_tsv(
            os.path.join(args.out, f"certify_{strategy}.tsv"), cert, y
        )
        results[strategy] = cert
        if args.attack:
            attacks[strategy] = _attack(args, clf, X, y)
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


def _attack(args, clf, X, y):
    """PGD on ``clf``'s smoothed soft classifier at ``args.radii``."""
    from .attacks import smoothed_pgd_attack

    _log(args, f"attacking {len(X)} inputs at radii {list(args.radii)} ...")
    start = time.perf_counter()
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
    _log(args, f"attack: {time.perf_counter() - start:.1f} s")
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
            _log(args, "matplotlib is not installed: no plot (pip install matplotlib)")
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
