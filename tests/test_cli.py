import subprocess
import sys

import numpy as np
import pytest

from smoothlearn.metrics import read_certificates_tsv
from smoothlearn.strategies import IsotropicDD


def _run(*args, cwd=None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "smoothlearn", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def _reproducible_env():
    """The environment for runs compared bit for bit: one thread and MKL's
    reproducible code path. Otherwise float32 sums in the network's passes
    may be reordered between processes (MKL picks kernels by thread count
    and buffer alignment), a data-dependent sigma moves by an ulp, and the
    memory's joint step, whose choices (a slab's direction, cut or cap) are
    discrete, can carry that to a neighbour's radius (seen once in CI: 3 of
    256 radii, up to 8e-4 relative). That is float rounding, which n_jobs
    documents; this test is about the log and the resume."""
    import os

    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MKL_CBWR": "COMPATIBLE",
    }


def test_certify_end_to_end_on_digits(tmp_path):
    out = tmp_path / "results"
    proc = _run(
        "certify",
        "--n",
        "500",
        "--n0",
        "50",
        "--n-test",
        "30",
        "--max-epochs",
        "5",
        "--out",
        str(out),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # a caption says what the numbers are
    assert lines[1].startswith("certified accuracy (%) at l2 radius R;")
    assert lines[2].split()[:3] == ["strategy", "R=0", "R=0.25"]
    assert lines[3].startswith("cohen")
    log = read_certificates_tsv(out / "certify_cohen.tsv")
    assert len(log) == 30 and log.correct.mean() > 0.5
    assert (out / "summary.txt").read_text().splitlines()[
        1:
    ] == proc.stdout.splitlines()[1:]
    assert (out / "certified_accuracy.png").stat().st_size > 1000
    # report re-renders the table from the TSV logs, at other radii if asked
    (out / "certified_accuracy.png").unlink()
    again = _run("report", str(out), "-q")
    assert again.returncode == 0, again.stderr
    assert again.stdout == proc.stdout
    assert (out / "certified_accuracy.png").stat().st_size > 1000
    other = _run("report", str(out), "--radii", "0", "0.1", "--no-plot")
    assert other.stdout.splitlines()[2].split() == [
        "strategy",
        "R=0",
        "R=0.1",
        "ACR",
        "ACR~",
    ]
    assert _run("report", str(tmp_path)).returncode == 2


def test_npz_data_and_saved_model(tmp_path):
    rng = np.random.RandomState(0)
    X = rng.randn(200, 3).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    np.savez(tmp_path / "toy.npz", X=X, y=y)
    model = tmp_path / "model.joblib"
    args = ["--data", str(tmp_path / "toy.npz"), "--n", "300", "--n-test", "10", "-q"]
    first = _run(
        "certify", *args, "--save-model", str(model), "--out", str(tmp_path / "a")
    )
    assert first.returncode == 0, first.stderr
    again = _run("certify", *args, "--model", str(model), "--out", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout  # same model, same seed, same certificates


@pytest.mark.parametrize(
    "args",
    [
        ["--sigma", "-1"],
        ["--strategy", "bogus"],
        ["--n", "zero"],
        ["--data", "/does/not/exist"],
        ["--alpha", "0.9"],
    ],
)
def test_bad_arguments_give_one_line_and_exit_code_2(args, tmp_path):
    proc = _run("certify", *args, "--out", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0]
    assert "Traceback" not in proc.stderr


def test_radius_tolerance_spends_fewer_draws_and_logs_them(tmp_path):
    out = tmp_path / "results"
    args = ["--n", "4000", "--n-test", "40", "--max-epochs", "5", "-q"]
    proc = _run("certify", *args, "--radius-tolerance", "0.05", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "radius_tolerance=0.05" in proc.stdout
    log = read_certificates_tsv(out / "certify_cohen.tsv")
    assert (log.n_draws <= 4000).all() and log.n_draws.mean() < 4000
    fixed = _run("certify", *args, "--out", str(tmp_path / "fixed"))
    assert fixed.returncode == 0, fixed.stderr
    assert (
        read_certificates_tsv(tmp_path / "fixed" / "certify_cohen.tsv").n_draws == 4000
    ).all()
    assert _run("certify", "--radius-tolerance", "1.5").returncode == 2


def test_help_lists_every_option():
    proc = _run("certify", "--help")
    assert proc.returncode == 0
    for option in ("--data", "--strategy", "--sigma", "--n0", "--alpha", "--out"):
        assert option in proc.stdout


def test_killed_cli_run_resumes_to_the_same_results(tmp_path):
    import signal
    import time

    common = [
        "certify",
        "--strategy",
        "isotropic_dd",
        "--n",
        "20000",
        "--n-test",
        "256",
        "--max-epochs",
        "2",
        "--hidden",
        "64",
        "-q",
        "--no-plot",
    ]
    env = _reproducible_env()
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "smoothlearn", *common, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    log = out / "certify_isotropic_dd.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline:
        if log.exists() and len(log.read_text().splitlines()) > 64:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 64 < len(log.read_text().splitlines()) < 257
    resumed = _run(*common, "--out", str(out), "--resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    fresh = _run(*common, "--out", str(tmp_path / "fresh"), env=env)
    assert fresh.returncode == 0, fresh.stderr
    assert resumed.stdout == fresh.stdout
    a = read_certificates_tsv(out / "certify_isotropic_dd.tsv")
    b = read_certificates_tsv(tmp_path / "fresh" / "certify_isotropic_dd.tsv")
    for field in ("label", "abstained", "radius", "proxy_radius"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_compare_prints_one_row_per_strategy(tmp_path):
    proc = _run(
        "compare",
        "--strategy",
        "cohen",
        "isotropic_dd",
        "--n",
        "300",
        "--n0",
        "30",
        "--n-test",
        "10",
        "--max-epochs",
        "2",
        "--hidden",
        "32",
        "-q",
        "--no-plot",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    table, smoothings = proc.stdout.split("\n\nsmoothings:\n")
    rows = [line.split()[0] for line in table.splitlines()[3:]]
    assert rows == ["cohen", "isotropic_dd"]
    # under the table, each row's smoothing written whole
    assert smoothings.splitlines() == [
        "  cohen: cohen() gaussian sigma=0.25",
        "  isotropic_dd: " + IsotropicDD().describe() + " gaussian sigma=0.25",
    ]
    assert (tmp_path / "certify_isotropic_dd.tsv").exists()


def test_a_later_model_run_continues_the_memory(tmp_path):
    """The memory is saved with the model after each run: a second run on the
    same inputs finds each centre in its own remembered region (same label:
    untouched) and the memory holds both runs' regions only once per input."""
    import joblib

    model = tmp_path / "model.joblib"
    common = [
        "certify",
        "--strategy",
        "isotropic_dd",
        "--n",
        "300",
        "--n0",
        "30",
        "--n-test",
        "12",
        "--max-epochs",
        "2",
        "--hidden",
        "16",
        "-q",
        "--no-plot",
    ]
    first = _run(*common, "--save-model", str(model), "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    saved = joblib.load(model)
    (memory,) = saved.memories_.values()
    entries = memory.n_entries_
    assert entries > 0 and memory.n_seen_ == 12
    # the --out copy is the same state; the at-start copy has no memory yet
    assert joblib.load(tmp_path / "a" / "model.joblib").memories_.keys() == (
        saved.memories_.keys()
    )
    assert joblib.load(tmp_path / "a" / "model_at_start.joblib").memories_ == {}
    second = _run(*common, "--model", str(model), "--out", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    (memory,) = joblib.load(model).memories_.values()
    assert memory.n_seen_ == 24
    # each input met its own earlier region (same label), so nothing changed
    assert memory.n_entries_ == 2 * entries
    assert second.stdout.splitlines()[1:] == first.stdout.splitlines()[1:]


def _write_idx(path, array):
    import gzip
    import struct

    array = np.asarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.tobytes())


@pytest.mark.parametrize("sep", ["-", "."])
def test_both_mnist_file_namings_are_read(tmp_path, sep):
    from smoothlearn.datasets import load_dataset

    rng = np.random.RandomState(0)
    for prefix, n in (("train", 30), ("t10k", 10)):
        _write_idx(
            tmp_path / f"{prefix}-images{sep}idx3-ubyte.gz",
            rng.randint(0, 256, (n, 4, 4)),
        )
        _write_idx(tmp_path / f"{prefix}-labels{sep}idx1-ubyte.gz", np.arange(n) % 3)
    data = load_dataset(str(tmp_path))
    assert data.X_train.shape == (30, 16) and data.X_test.shape == (10, 16)
    np.testing.assert_array_equal(data.y_test, np.arange(10) % 3)


def test_resume_with_one_strategy_keeps_every_memory(tmp_path, monkeypatch):
    """Interrupted during cohen after isotropic_dd finished, resumed with cohen
    only: the saved model still holds isotropic_dd's memory, whose entries are
    the inputs its TSV log lists as certified, with their labels and radii."""
    import joblib

    from smoothlearn import SmoothedClassifier
    from smoothlearn.__main__ import main

    out = tmp_path / "run"
    common = [
        "certify",
        "--n",
        "300",
        "--n0",
        "30",
        "--n-test",
        "12",
        "--max-epochs",
        "2",
        "--hidden",
        "16",
        "-q",
        "--no-plot",
        "--out",
        str(out),
        "--save-model",
        str(tmp_path / "saved.joblib"),
    ]
    certify = SmoothedClassifier.certify

    def interrupted_in_cohen(self, X, **kwargs):
        if self.strategy.name == "cohen":
            raise KeyboardInterrupt
        return certify(self, X, **kwargs)

    monkeypatch.setattr(SmoothedClassifier, "certify", interrupted_in_cohen)
    assert main([*common, "--strategy", "isotropic_dd", "cohen"]) == 130
    monkeypatch.undo()
    assert main([*common, "--strategy", "cohen", "--resume"]) == 0
    log = read_certificates_tsv(out / "certify_isotropic_dd.tsv")
    certified = ~log.abstained
    assert certified.sum() > 0
    for path in (out / "model.joblib", tmp_path / "saved.joblib"):
        (memory,) = joblib.load(path).memories_.values()
        entries = memory._entries()
        assert len(entries) == certified.sum()
        assert [label for _, label in entries] == log.label[certified].tolist()
        np.testing.assert_allclose(
            [region.inradius for region, _ in entries], log.radius[certified]
        )


def test_a_model_file_keeps_the_memories_another_run_added(tmp_path):
    """Two runs load one --model file: one certifies a data-dependent strategy
    and saves; the other, saving later, keeps that memory. If both changed
    the same memory, the second refuses with one line saying what to do."""
    import types

    import joblib

    from smoothlearn._cli_models import save_memories

    from .test_memory_state import X1, X2, slab_classifier

    args = types.SimpleNamespace(quiet=True)
    model = tmp_path / "model.joblib"
    joblib.dump(slab_classifier(), model)
    model = str(model)
    first, second, third = (joblib.load(model) for _ in range(3))
    first.certify(X1)
    save_memories(args, first, [model])
    second.set_params(strategy="cohen").certify(X2)  # no memory of its own
    save_memories(args, second, [model])
    (memory,) = joblib.load(model).memories_.values()
    assert memory.n_entries_ == 1
    # the file's memory continues the one this run holds: taken, then saved
    assert second.certify(X2).label[0] == 0
    third.certify(X2)  # went on from the empty memory the file had
    with pytest.raises(ValueError, match="another run changed"):
        save_memories(args, third, [model])
    (memory,) = joblib.load(model).memories_.values()
    assert memory.n_entries_ == 1  # the file is left as it was


def test_a_pretrained_network_is_certified_through_a_trained_denoiser(tmp_path, capsys):
    import joblib
    import torch
    from sklearn.datasets import load_digits

    from smoothlearn.__main__ import main

    X, y = load_digits(return_X_y=True)
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)
    )
    path = tmp_path / "net.pt"
    torch.save(net, path)
    saved = path.read_bytes()
    out = tmp_path / "results"
    common = ["--n", "300", "--n0", "30", "--n-test", "10", "-q", "--no-plot"]
    args = [*common, "--model", str(path), "--denoiser", "auto", "--out", str(out)]
    assert main([*args, "--max-epochs", "2", "--training", "mse"]) == 0
    assert "denoiser=ResidualMLPDenoiser" in capsys.readouterr().out
    assert path.read_bytes() == saved  # the network's file is not a model to update
    clf = joblib.load(out / "model.joblib")
    assert type(clf.training_).__name__ == "DenoiserMSE"
    for p, q in zip(net.parameters(), clf.net_.module_.classifier.parameters()):
        assert torch.equal(p, q)
    # a torch network without --denoiser, a denoiser without a network: errors
    assert main([*common, "--model", str(path), "--out", str(out)]) == 2
    assert "certified with --denoiser auto" in capsys.readouterr().err
    assert main([*common, "--denoiser", "auto", "--out", str(out)]) == 2
    assert "name it with --model" in capsys.readouterr().err


def test_a_pretrained_network_is_certified_through_a_diffusion_model(tmp_path, capsys):
    import joblib
    import torch

    from smoothlearn.__main__ import main
    from smoothlearn.denoisers import DiffusionDenoiser

    from .test_diffusion import DDPM, GaussianOptimal

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 10))
    net_path, diffusion_path = tmp_path / "net.pt", tmp_path / "diffusion.pt"
    torch.save(net, net_path)
    denoiser = DiffusionDenoiser(
        GaussianOptimal(torch.full((64,), -0.5), 0.5, DDPM), DDPM
    )
    torch.save(denoiser, diffusion_path)
    saved = diffusion_path.read_bytes()
    out = tmp_path / "results"
    common = ["--n", "200", "--n0", "20", "--n-test", "5", "-q", "--no-plot"]
    common += ["--model", str(net_path), "--denoiser", "diffusion", "--out", str(out)]
    assert main([*common, "--diffusion-model", str(diffusion_path)]) == 0
    printed = capsys.readouterr().out
    assert f"denoiser=DiffusionDenoiser timestep={denoiser.timestep(0.25)}" in printed
    assert diffusion_path.read_bytes() == saved
    clf = joblib.load(out / "model.joblib")
    assert isinstance(clf.denoiser_, DiffusionDenoiser)
    assert len(clf.net_.history) == 0  # nothing was trained
    # no diffusion model, or a file without one: errors before any work
    assert main(common) == 2
    assert "needs --diffusion-model" in capsys.readouterr().err
    assert main([*common, "--diffusion-model", str(net_path)]) == 2
    assert "holds no DiffusionDenoiser" in capsys.readouterr().err


def test_a_diffusers_folder_is_read_locally(tmp_path, capsys):
    diffusers = pytest.importorskip("diffusers")
    import torch

    from smoothlearn.__main__ import main

    torch.manual_seed(0)
    folder = tmp_path / "ddpm"
    diffusers.UNet2DModel(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        block_out_channels=(4, 8),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        layers_per_block=1,
        norm_num_groups=4,
        add_attention=False,
    ).save_pretrained(folder / "unet")
    diffusers.DDPMScheduler().save_pretrained(folder / "scheduler")
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    torch.save(net, tmp_path / "net.pt")
    args = ["--n", "50", "--n0", "10", "--n-test", "2", "-q", "--no-plot", "--images"]
    args += ["--model", str(tmp_path / "net.pt"), "--denoiser", "diffusion"]
    args += ["--diffusion-model", str(folder), "--out", str(tmp_path / "out")]
    assert main(args) == 0
    assert "denoiser=DiffusionDenoiser" in capsys.readouterr().out
    assert main([*args[:-3], str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "holds no diffusers UNet2DModel" in capsys.readouterr().err


def test_version():
    import smoothlearn

    proc = _run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"smoothlearn {smoothlearn.__version__}"


_SMALL = ["--n", "300", "--n0", "30", "--n-test", "10", "--max-epochs", "2"]
_SMALL += ["--hidden", "16", "-q", "--no-plot"]


def test_a_results_folder_is_never_overwritten_without_overwrite(tmp_path, capsys):
    from smoothlearn.__main__ import main

    out = tmp_path / "results"
    assert main(["certify", *_SMALL, "--out", str(out)]) == 0
    first = (out / "summary.txt").read_text()
    (out / "summary.txt").write_text(first + "the user's note\n")
    capsys.readouterr()
    # a second run writes beside the first, and says where
    assert main(["certify", *_SMALL, "--sigma", "0.5", "--out", str(out)]) == 0
    said = capsys.readouterr().err
    assert f"writing to {out}-2 instead" in said and "--overwrite" in said
    assert (out / "summary.txt").read_text() == first + "the user's note\n"
    assert "sigma=0.5" in (tmp_path / "results-2" / "summary.txt").read_text()
    assert main(["certify", *_SMALL, "--out", str(out)]) == 0
    assert "writing to" in capsys.readouterr().err
    assert (tmp_path / "results-3" / "summary.txt").exists()
    # --overwrite replaces the earlier run's files in place
    assert main(["certify", *_SMALL, "--overwrite", "--out", str(out)]) == 0
    assert "writing to" not in capsys.readouterr().err
    assert (out / "summary.txt").read_text() == first
    assert not (tmp_path / "results-4").exists()
    # ... but never the model a command names, even inside the folder
    mine = out / "model_mine.joblib"
    assert main(["certify", *_SMALL, "--overwrite", "--save-model", str(mine),
                 "--out", str(out)]) == 0  # fmt: skip
    assert main(["certify", *_SMALL, "--overwrite", "--model", str(mine),
                 "--out", str(out)]) == 0  # fmt: skip
    assert mine.exists()


def test_an_interrupted_run_prints_the_resume_line(tmp_path, monkeypatch, capsys):
    import shlex

    from smoothlearn import SmoothedClassifier
    from smoothlearn.__main__ import main

    def interrupted(self, X, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(SmoothedClassifier, "certify", interrupted)
    out = tmp_path / "run"
    assert main(["certify", *_SMALL, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    resume = err.strip().splitlines()[-1].strip()
    assert shlex.split(resume) == [
        "smoothlearn",
        "certify",
        *_SMALL,
        "--out",
        str(out),
        "--resume",
    ]
    monkeypatch.undo()
    assert main(shlex.split(resume)[1:]) == 0  # the line it prints runs
    assert (out / "summary.txt").exists() and not (tmp_path / "run-2").exists()


def test_table_and_plot_state_the_largest_certifiable_radius(tmp_path):
    pytest.importorskip("matplotlib")
    from smoothlearn.bounds import largest_certifiable_radius

    out = tmp_path / "results"
    proc = _run("certify", *_SMALL[:-1], "--sigma", "0.5", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    caption = proc.stdout.splitlines()[1]
    r_max = largest_certifiable_radius("gaussian", 0.5, 300, 0.001)
    assert f"largest radius certifiable at these settings: {r_max:.3g}" in caption
    assert "d-th root" in caption and "n-th root" not in caption
    assert (out / "certified_accuracy.png").stat().st_size > 1000


def test_standardized_tabular_data_is_certified_in_the_space_asked(tmp_path, capsys):
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    from smoothlearn.__main__ import main
    from smoothlearn.datasets import load_dataset

    X, y = load_breast_cancer(return_X_y=True)
    np.savez(tmp_path / "cancer.npz", X=X, y=y)
    common = ["certify", "--data", str(tmp_path / "cancer.npz"), "--standardize"]
    common += ["--sigma", "0.5", "--n", "1000", "--n-test", "30", "--max-epochs", "5"]
    common += ["--hidden", "32", "-q", "--no-plot", "--attack", "--radii", "0", "0.5"]
    assert main([*common, "--space", "model", "--out", str(tmp_path / "m")]) == 0
    model_run = capsys.readouterr()
    assert "standardize=1 space=model" in model_run.out
    assert "largest radius certifiable" in model_run.out
    assert "warning" not in model_run.err
    assert main([*common, "--out", str(tmp_path / "i")]) == 0  # space input
    input_run = capsys.readouterr()
    assert "largest radius certifiable" not in input_run.out  # the scaler's too
    assert "feature 19," in input_run.err and "--space model" in input_run.err
    in_model = read_certificates_tsv(tmp_path / "m" / "certify_cohen.tsv")
    in_input = read_certificates_tsv(tmp_path / "i" / "certify_cohen.tsv")
    assert set(in_model.space) == {"model"} and set(in_input.space) == {"input"}
    np.testing.assert_array_equal(in_model.label, in_input.label)
    # the same model and draws: the input's radius is the model's times the
    # smallest spread the scaler divides by (an isotropic region's preimage)
    data = load_dataset(str(tmp_path / "cancer.npz"), random_state=0)
    spread = StandardScaler().fit(data.X_train).scale_.min()
    np.testing.assert_allclose(in_input.radius, in_model.radius * spread, rtol=1e-9)
    assert in_model.radius.max() > 0.5
    # the attack in the certificates' units: 0.5 in the data's units is far
    # more in the model's (up to 0.5 / 0.0023), where 0.5 flips few
    attacked = {}
    for space in "mi":
        rows = (tmp_path / space / "attack.txt").read_text().splitlines()
        certified, attack = rows[2].split(), rows[3].split()
        assert attack[-1] == "0"  # no flip inside a certified region
        assert float(attack[3]) >= float(certified[3])
        attacked[space] = float(attack[3])
    assert attacked["i"] < attacked["m"] - 50
    images = main(["certify", "--images", "--standardize", "--out", str(tmp_path)])
    assert images == 2 and "--standardize is for flat" in capsys.readouterr().err


def test_precision_is_a_certification_option_recorded_in_the_smoothing(tmp_path):
    out = tmp_path / "bf16"
    args = ["--n", "300", "--n-test", "10", "--max-epochs", "2", "-q", "--no-plot"]
    proc = _run("certify", *args, "--precision", "bf16", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "cohen() gaussian sigma=0.25 precision=bf16" in proc.stdout
    log = read_certificates_tsv(out / "certify_cohen.tsv")
    assert (log.smoothing == "cohen() gaussian sigma=0.25 precision=bf16").all()
    assert _run("certify", "--precision", "int8").returncode == 2
