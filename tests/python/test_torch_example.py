"""The PyTorch example as a user runs it: 4 processes joined by seeds train a torch CNN on
Fashion-MNIST through gossamer and reach the target accuracy."""

import json
import os
import subprocess
import sys

import pytest

import gossamer_or_skip  # noqa: F401 - skips this file without the module

pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "..", "examples", "pytorch", "launch.py")
DATA = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")),
                    reason="Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)")
def test_four_processes_reach_the_target_accuracy():
    out = subprocess.run(
        [sys.executable, LAUNCH, "--processes", "4", "--json", "--epochs", "2", "--model", "cnn"],
        capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert out.returncode == 0, out.stderr[-3000:]
    peers = json.loads(out.stdout.splitlines()[-1])["peers"]
    assert len(peers) == 4
    steps = peers[0]["steps"]
    for peer in peers:
        assert peer["steps"] == steps and peer["algorithm"] == "gosgd"
        assert peer["bytes_sent"] > 0
        assert peer["test_accuracy"] >= 0.80, peer
        assert sum(1 for e in peer["events"] if e["kind"] == "joined") >= 4  # everyone, itself too


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")),
                    reason="Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)")
def test_mixed_precision_trains_float32_parameters():
    # torch.autocast (bfloat16 on the CPU) with a GradScaler around gossamer's optimizer.
    out = subprocess.run(
        [sys.executable, LAUNCH, "--processes", "2", "--json", "--max-steps", "150", "--model", "mlp",
         "--amp"],
        capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert out.returncode == 0, out.stderr[-3000:]
    peers = json.loads(out.stdout.splitlines()[-1])["peers"]
    for peer in peers:
        assert peer["steps"] == 150
        assert peer["test_accuracy"] >= 0.70, peer
