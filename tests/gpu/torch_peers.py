"""Four processes train one torch.nn.Module (an MLP on a seeded synthetic task) through
gossamer.torch, on the CPU or on CUDA, and the run is checked: every peer exits cleanly, takes the
same number of steps, sends bytes to the others and reaches the target test accuracy.

    PYTHONPATH=build/python python3 tests/gpu/torch_peers.py --device cuda [--json]

The launcher starts the first process, reads the address it listens on, and starts the others
with it as their seed (as examples/pytorch/launch.py does). The task: 10 classes of Gaussian
blobs in 32 dimensions, the same in every process (one seed); the best possible classifier is
right about 94% of the time.
Prints one line per peer and a verdict; with --json a last line of JSON figures. Exit 0 when the
run passed, 1 with the reason when it did not, 2 on bad arguments.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CLASSES = 10
FEATURES = 32


def synthetic(count, seed, split):
    """(inputs float32 [count, FEATURES], labels int64 [count]): blobs around fixed centers."""
    import numpy as np

    centers = np.random.default_rng(seed).normal(size=(CLASSES, FEATURES)).astype(np.float32)
    rng = np.random.default_rng([seed, 1 if split == "train" else 2])
    labels = rng.integers(0, CLASSES, size=count)
    inputs = centers[labels] + 1.5 * rng.normal(size=(count, FEATURES)).astype(np.float32)
    return inputs.astype(np.float32), labels.astype(np.int64)


def peer_main(args):
    """One peer: prints 'listening on HOST:PORT', trains, prints the result as one JSON line."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import gossamer
    import gossamer.torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_peers: --device cuda, but torch sees no CUDA device "
                 "(torch.cuda.is_available() is False; torch %s)" % torch.__version__)
    device = torch.device(args.device)
    torch.set_num_threads(1)
    gossamer.set_log_level("warn")
    torch.manual_seed(args.seed)  # the same initial model on every peer
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, CLASSES)).to(device)
    train_x, train_y = (torch.from_numpy(a).to(device) for a in synthetic(args.train, args.seed, "train"))
    test_x, test_y = (torch.from_numpy(a).to(device) for a in synthetic(2000, args.seed, "test"))

    def evaluate(module, samples):
        n = len(test_y) if samples == 0 else min(samples, len(test_y))
        was_training = module.training
        module.eval()
        with torch.no_grad():
            out = module(test_x[:n])
            loss_sum = F.cross_entropy(out, test_y[:n], reduction="sum").item()
            correct = (out.argmax(1) == test_y[:n]).sum().item()
        module.train(was_training)
        return correct, n, loss_sum

    peer = gossamer.torch.make_peer(
        model, evaluate=evaluate, algorithm=args.algorithm, steps=args.steps, batch=args.batch,
        min_peers=args.processes, listen="127.0.0.1:0",
        seeds=[s for s in args.seeds.split(",") if s], secret_file=args.secret_file, seed=args.seed)
    print("listening on %s" % peer.endpoint, flush=True)
    opt = gossamer.torch.Optimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9), peer)
    shard, order, cursor, epoch = None, None, 0, 0
    if peer.start():
        while not peer.done:
            if peer.shard != shard or cursor >= len(order):
                epoch += 1
                shard, cursor = peer.shard, 0
                everything = np.random.default_rng([args.seed, epoch]).permutation(len(train_y))
                order = torch.from_numpy(everything[shard[0]::shard[1]]).to(device)
            rows = order[cursor:cursor + args.batch]
            cursor += args.batch
            opt.zero_grad()
            loss = F.cross_entropy(model(train_x[rows]), train_y[rows])
            loss.backward()
            opt.step(loss=loss, samples=len(rows))
    result = peer.finish()
    result["device"] = str(next(model.parameters()).device)
    print(json.dumps(result, default=str), flush=True)
    return 0 if result.get("join_failure") is None else 1


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def launch(args):
    """Starts args.processes peers, waits for them under args.timeout, checks the run."""
    started = time.time()
    me = [sys.executable, os.path.abspath(__file__), "--role", "peer"]
    common = ["--device", args.device, "--processes", str(args.processes), "--steps", str(args.steps),
              "--batch", str(args.batch), "--lr", str(args.lr), "--algorithm", args.algorithm,
              "--train", str(args.train), "--seed", str(args.seed)]
    problems, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        secret = os.path.join(tmp, "secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(32).hex())
        common += ["--secret-file", secret]
        logs = [open(os.path.join(tmp, "peer%d.err" % i), "w+") for i in range(args.processes)]
        first = subprocess.Popen(me + common, stdout=subprocess.PIPE, stderr=logs[0], text=True)
        line = first.stdout.readline()
        processes = [first]
        if line.startswith("listening on "):
            seed = line.split()[-1]
            processes += [subprocess.Popen(me + common + ["--seeds", seed], stdout=subprocess.PIPE,
                                           stderr=logs[i], text=True)
                          for i in range(1, args.processes)]
        outputs = []
        for rank, process in enumerate(processes):
            try:
                out, _ = process.communicate(timeout=max(1.0, args.timeout - (time.time() - started)))
            except subprocess.TimeoutExpired:
                for p in processes:
                    p.kill()
                out, _ = process.communicate()
                problems.append("peer %d did not finish within %.0f s" % (rank, args.timeout))
            outputs.append(out)
        for rank, (process, out) in enumerate(zip(processes, outputs)):
            logs[rank].seek(0)
            err = logs[rank].read().strip().splitlines()
            result = last_json(out)
            if len(processes) < args.processes:
                problems.append("the first peer did not start: %s" % (err[-1] if err else "no output"))
            elif process.returncode != 0 or result is None:
                problems.append("peer %d exited with %s: %s" % (rank, process.returncode,
                                                                  err[-1] if err else "no output"))
            else:
                results.append(result)
        for log in logs:
            log.close()

    for r in results:
        print("peer %016x on %s: %d steps, test accuracy %.2f%%, %.2f MB sent"
              % (r["peer"], r["device"], r["steps"], 100 * r["test_accuracy"], r["bytes_sent"] / 1e6))
    accuracies = [r["test_accuracy"] for r in results]
    if results:
        if len({r["steps"] for r in results}) != 1:
            problems.append("the peers took different numbers of steps: %s" % [r["steps"] for r in results])
        if any(r["bytes_sent"] <= 0 for r in results):
            problems.append("a peer sent nothing to the others")
        if not all(r["device"].startswith(args.device) for r in results):
            problems.append("a module ended on another device: %s" % [r["device"] for r in results])
        if min(accuracies) < args.min_accuracy:
            problems.append("test accuracy %.4f is below the target %.2f" % (min(accuracies), args.min_accuracy))
    seconds = time.time() - started
    verdict = "passed" if not problems else "failed: " + "; ".join(problems)
    print("torch_peers: %d processes on %s, %.1f s: %s" % (args.processes, args.device, seconds, verdict))
    if args.json:
        print(json.dumps({"device": args.device, "processes": args.processes, "peers": len(results),
                          "steps": results[0]["steps"] if results else 0,
                          "accuracy_min": min(accuracies) if results else None,
                          "accuracy_mean": sum(accuracies) / len(accuracies) if results else None,
                          "seconds": seconds, "passed": not problems}))
    return 0 if not problems else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--algorithm", default="gosgd")
    parser.add_argument("--train", type=int, default=8000, help="training samples")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-accuracy", type=float, default=0.85)
    parser.add_argument("--timeout", type=float, default=180, help="seconds for the whole run")
    parser.add_argument("--json", action="store_true", help="print a last line of JSON figures")
    parser.add_argument("--role", choices=["launch", "peer"], default="launch", help=argparse.SUPPRESS)
    parser.add_argument("--seeds", default="", help=argparse.SUPPRESS)
    parser.add_argument("--secret-file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.processes < 1 or args.steps < 1 or args.batch < 1 or args.train < args.processes:
        parser.error("--processes, --steps and --batch must be at least 1, --train at least --processes")
    return peer_main(args) if args.role == "peer" else launch(args)


if __name__ == "__main__":
    sys.exit(main())
