"""The ``smoothlearn`` command line's options: the argument parser and the
checks of its values."""

import argparse

__all__ = ["build_parser"]


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
