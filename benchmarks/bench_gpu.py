"""Certifying a ResNet-20 on CIFAR-shaped inputs on a GPU: smoothlearn against ART.

The published anchor: Cohen et al.'s logs show ResNet-20 on CIFAR-10 at
3.1 s per image (n = 100,000) on their GPU. This certifies the same
architecture (He et al.'s CIFAR ResNet-20: 3 stages of 3 basic blocks, 16/32/64
channels, 0.27M parameters; weights as initialised, which changes nothing in
the time) on random 3x32x32 inputs with n0 = 100 and n draws per image:

* smoothlearn: ``SmoothedClassifier(module, max_epochs=0, device=...)``, its
  ``certify`` (noise banks drawn on the device, counts kept there, the first
  convolution's response reused on a GPU);
* ART (``adversarial-robustness-toolbox``, the ``bench`` extra): IBM ART 1.20's
  ``PyTorchRandomizedSmoothing.certify`` on the same module and device.

Prints seconds per image for each and ART's time over smoothlearn's. Each
contender is warmed up on one image first (cuDNN autotuning, the first-layer
split, ART's own set-up). ``--strategies`` times smoothlearn's optimising
strategies too (their optimisers, curvature and comparisons on the device),
each against cohen; ``--trace`` counts, with torch's profiler, the copies from
the device to the host during one cohen certification (the counting loop keeps
its counts on the device: a copy per batch would show as about n / batch
copies per image).

    python benchmarks/bench_gpu.py                    # a GPU: n = 100,000
    python benchmarks/bench_gpu.py --strategies cohen,ancer,rancer --trace
    python benchmarks/bench_gpu.py --device cpu --n 2000 --inputs 2

``--results-file benchmarks/results/synthetic.json`` writes the seconds per
image and the ratios into that results file as ``--results-table`` (default
``gpu_resnet20``), with the device's name among the machine's.
"""

import argparse
import time

import numpy as np
import torch
from _results import add_arguments, run_record, write_table
from bench_user_modules import art_certify
from torch import nn
from torch.nn import functional as F

from smoothlearn import SmoothedClassifier


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet of ``depth = 6k + 2`` layers, as users write it."""

    def __init__(self, depth=20, n_classes=10):
        super().__init__()
        blocks = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, planes = [], 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            for block in range(blocks):
                layers.append(BasicBlock(planes, width, stride if block == 0 else 1))
                planes = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, n_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def ResNet20(n_classes=10):
    """He et al.'s CIFAR ResNet-20."""
    return CifarResNet(20, n_classes)


def synchronised(fn, device):
    def run(*a):
        out = fn(*a)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return out

    return run


def device_parser(description):
    """The arguments of a certification sized by its device (``--n``: 100,000
    on a GPU, 2,000 elsewhere, as :func:`device_settings` fills it in)."""
    parser = argparse.ArgumentParser(description=description)
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default_device)
    parser.add_argument("--n", type=int, default=None, help="100,000 on a GPU")
    parser.add_argument("--n0", type=int, default=100)
    parser.add_argument("--inputs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=1000)
    return parser


def device_settings(parser):
    """``parser``'s arguments, ``--n`` filled in for the device."""
    args = parser.parse_args()
    if args.n is None:
        args.n = 100_000 if args.device.startswith("cuda") else 2000
    return args


def main():
    parser = device_parser(__doc__.splitlines()[0])
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument(
        "--strategies", default="cohen", help="comma-separated, e.g. cohen,ancer"
    )
    parser.add_argument("--trace", action="store_true")
    add_arguments(parser, "gpu_resnet20", "benchmarks/results/synthetic.json")
    args = device_settings(parser)
    record = run_record(args.device)
    torch.manual_seed(0)
    module = ResNet20().to(args.device).eval()
    rng = np.random.RandomState(0)
    X = rng.rand(args.inputs, 3, 32, 32).astype(np.float32)
    clf = SmoothedClassifier(
        module,
        max_epochs=0,
        device=args.device,
        sigma=args.sigma,
        n0=args.n0,
        n=args.n,
        batch_size=args.batch_size,
        random_state=0,
    ).fit(rng.rand(10, 3, 32, 32).astype(np.float32), np.arange(10))  # ten classes
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(
        f"ResNet-20, {args.inputs} inputs of 3x32x32, n0={args.n0}, n={args.n}, "
        f"batch {args.batch_size}, on {name}"
    )
    runs = {}
    for strategy in args.strategies.split(","):
        label = "smoothlearn" if strategy == "cohen" else f"smoothlearn {strategy}"
        runs[label] = synchronised(_certifier(clf, strategy), args.device)
    art = art_certify(
        module,
        (3, 32, 32),
        args.sigma,
        args.n0,
        args.n,
        args.batch_size,
        device=args.device,
    )
    if art is not None:
        runs["ART"] = synchronised(art, args.device)
    seconds = {}
    for label, run in runs.items():
        run(X[:1])  # warm up
        start = time.perf_counter()
        run(X)
        seconds[label] = (time.perf_counter() - start) / len(X)
        print(f"{label:<22} {seconds[label]:8.3f} s per image", flush=True)
    base = seconds.get("smoothlearn")
    if base is not None:
        for label, s in seconds.items():
            if label != "smoothlearn":
                print(f"{label} / smoothlearn (cohen) {s / base:.2f}x")
    if args.trace:
        print(device_to_host_copies(_certifier(clf, "cohen"), X, args))
    if args.results_file:
        write_table(
            args,
            columns=[
                {"key": "run", "label": "run"},
                {"key": "seconds", "label": "s per image", "format": ".3f"},
                {
                    "key": "vs_cohen",
                    "label": "over smoothlearn (cohen)",
                    "format": ".2fx",
                },
            ],
            rows=[
                {
                    "run": label,
                    "seconds": s,
                    "vs_cohen": s / base if base else "",
                }
                for label, s in seconds.items()
            ],
            settings={
                "device": name,
                "inputs": args.inputs,
                "n0": args.n0,
                "n": args.n,
                "batch_size": args.batch_size,
                "sigma": args.sigma,
                "strategies": args.strategies,
            },
            record=record,
        )


def _certifier(clf, strategy):
    # each strategy certifies the same fitted network (set_params of the
    # strategy keeps the fit)
    def certify(X):
        return clf.set_params(strategy=strategy).certify(X)

    return certify


def device_to_host_copies(certify, X, args):
    """One line: the device-to-host copies of one certification, per image."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if args.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        certify(X)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
    copies = sum(e.count for e in prof.key_averages() if "Memcpy DtoH" in e.key)
    syncs = sum(
        e.count for e in prof.key_averages() if e.key == "aten::_local_scalar_dense"
    )
    batches = -(-args.n // args.batch_size)
    return (
        f"cohen, one certification of {len(X)} images: {copies / len(X):.1f} "
        f"device-to-host copies and {syncs / len(X):.1f} scalar reads per image "
        f"({batches} counting batches per image)"
    )


if __name__ == "__main__":
    main()
