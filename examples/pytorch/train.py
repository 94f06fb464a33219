"""One peer of a decentralized PyTorch run on Fashion-MNIST (launch.py starts several).

The model is an ordinary torch.nn.Module (on the CPU or, with --device cuda, a GPU) and the
optimizer an ordinary torch.optim.SGD; gossamer trains over the module's own parameters and
gradients (laid out over two flat tensors on its device) and makes opt.step() the local step plus
the decentralized algorithm's exchange (gosgd by default). --amp trains under torch.autocast with
a GradScaler (bfloat16 on the CPU, float16 on a GPU; the parameters stay float32).
Each peer trains on its shard of the training set (peer.shard: it changes when peers join or
leave), and the run takes the same number of steps on every peer.

    PYTHONPATH=build/python python3 examples/pytorch/train.py --listen 127.0.0.1:7000 \
        --secret-file secret --min-peers 4          # first peer
    PYTHONPATH=build/python python3 examples/pytorch/train.py --listen 127.0.0.1:0 \
        --seeds 127.0.0.1:7000 --secret-file secret --min-peers 4   # the others
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import gossamer
import gossamer.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402


def cnn():
    """Two 3x3 convolutions with max-pooling and a dense head."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10),
    )


def mlp():
    """The MLP 784-256-256-10."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                         nn.ReLU(), nn.Linear(256, 10))


MODELS = {"cnn": cnn, "mlp": mlp}


def evaluator(images, labels):
    """evaluate(module, samples) -> (correct, samples, loss_sum) on the first samples."""
    x_all, y_all = torch.from_numpy(images), torch.from_numpy(labels)

    def evaluate(module, samples):
        device = next(module.parameters()).device
        n = len(y_all) if samples == 0 else min(samples, len(y_all))
        was_training = module.training
        module.eval()
        correct, loss_sum = 0, 0.0
        with torch.no_grad():
            for begin in range(0, n, 1000):
                x = x_all[begin:min(n, begin + 1000)].to(device)
                y = y_all[begin:min(n, begin + 1000)].to(device)
                out = module(x)
                loss_sum += F.cross_entropy(out, y, reduction="sum").item()
                correct += (out.argmax(1) == y).sum().item()
        module.train(was_training)
        return correct, n, loss_sum

    return evaluate


class Batches:
    """Mini-batches of this peer's shard; a new shuffle each pass, a new shard when it changes."""

    def __init__(self, images, labels, batch, seed):
        self.x, self.y = torch.from_numpy(images), torch.from_numpy(labels)
        self.batch, self.seed = batch, seed
        self.shard, self.order, self.cursor, self.epoch = None, None, 0, 0

    def next(self, shard):
        if shard != self.shard or self.cursor >= len(self.order):
            if shard == self.shard:
                self.epoch += 1
            self.shard, self.cursor = shard, 0
            index, count = shard
            everything = np.random.default_rng(self.seed + self.epoch).permutation(len(self.y))
            self.order = torch.from_numpy(everything[index::count])
        rows = self.order[self.cursor:self.cursor + self.batch]
        self.cursor += self.batch
        return self.x[rows], self.y[rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--seeds", default="", help="HOST:PORT,... of peers to join by")
    parser.add_argument("--secret-file", required=True)
    parser.add_argument("--min-peers", type=int, default=4)
    parser.add_argument("--algorithm", default="gosgd")
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--max-steps", type=int, default=0, help="instead of --epochs")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--eval-every", type=int, default=0, help="steps between evaluations")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of this process")
    parser.add_argument("--data-dir", default=fashion_mnist.DEFAULT_DIR)
    parser.add_argument("--log-level", default="warn")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--amp", action="store_true", help="torch.autocast with a GradScaler")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    gossamer.set_log_level(args.log_level)
    torch.manual_seed(args.seed)  # the same initial model on every peer
    device = torch.device(args.device)
    model = MODELS[args.model]().to(device)
    train_x, train_y = fashion_mnist.load("train", args.data_dir)
    test_x, test_y = fashion_mnist.load("test", args.data_dir)
    per_pass = math.ceil(len(train_y) / (args.min_peers * args.batch))
    steps = args.max_steps or math.ceil(args.epochs * per_pass)

    peer = gossamer.torch.make_peer(
        model, evaluate=evaluator(test_x, test_y), steps_per_epoch=per_pass,
        algorithm=args.algorithm, steps=steps, batch=args.batch, min_peers=args.min_peers,
        listen=args.listen, seeds=[s for s in args.seeds.split(",") if s],
        secret_file=args.secret_file, seed=args.seed, eval_every=args.eval_every,
        eval_samples=2000)
    # The launcher reads this line to seed the other peers.
    print("listening on %s" % peer.endpoint, flush=True)
    opt = gossamer.torch.Optimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum), peer)

    batches = Batches(train_x, train_y, args.batch, args.seed)
    # torch scales float16 gradients on CUDA only; bfloat16 on the CPU needs no scaling.
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp and device.type == "cuda")
    low = torch.float16 if device.type == "cuda" else torch.bfloat16
    started = time.time()
    if peer.start():
        while not peer.done:
            x, y = batches.next(peer.shard)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad()
            with torch.autocast(device_type=device.type, dtype=low, enabled=args.amp):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt, loss=loss, samples=len(y))
            scaler.update()
    result = peer.finish()
    result["seconds"] = time.time() - started
    result["events"] = peer.events()
    print(json.dumps(result), flush=True)
    return 0 if result["join_failure"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
