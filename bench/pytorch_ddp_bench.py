"""PyTorch through gossamer against PyTorch DistributedDataParallel, in the same run.

Both train the same MLP 784-256-256-10 on Fashion-MNIST with 4 processes on this machine, batch
64 per process, torch.optim.SGD (momentum), the same initial model and the same shards: once with
gossamer (gossamer.torch, algorithm gosgd by default) and once with DDP over gloo. Rank 0
evaluates its model on the whole test set every --eval-every steps with its clock stopped; the
time to the target accuracy is rank 0's training time until the first evaluation at or above it.
The gossamer run also measures the binding's own overhead: the time in gossamer's step outside
its waits on the others (the runtime's comm wait: every gather, request, pull, inbox wait and
send back-pressure) and outside the torch optimizer it calls, as a fraction of the step.

    PYTHONPATH=build/python python3 bench/pytorch_ddp_bench.py [--target 0.85] [--json FILE]
"""

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))


def worker(args):
    import torch
    import torch.nn.functional as F

    import fashion_mnist
    import train as example

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = example.mlp()
    train_x, train_y = fashion_mnist.load("train")
    test_x, test_y = fashion_mnist.load("test")
    evaluate = example.evaluator(test_x, test_y)
    per_pass = math.ceil(len(train_y) / (args.processes * args.batch))
    steps = math.ceil(args.max_epochs * per_pass)
    stop_file = os.path.join(args.dir, "stop")
    rank = args.rank

    if args.worker == "gossamer":
        import gossamer
        import gossamer.torch

        gossamer.set_log_level("warn")
        seeds = [] if rank == 0 else [open(os.path.join(args.dir, "seed")).read().strip()]
        peer = gossamer.torch.make_peer(
            model, algorithm=args.algorithm, steps=steps, batch=args.batch, min_peers=args.processes,
            listen="127.0.0.1:0", seeds=seeds, secret_file=os.path.join(args.dir, "secret"),
            seed=args.seed, final_eval=False, finish_timeout=120)
        if rank == 0:
            with open(os.path.join(args.dir, "seed.tmp"), "w") as f:
                f.write(peer.endpoint)
            os.rename(os.path.join(args.dir, "seed.tmp"), os.path.join(args.dir, "seed"))
        inner = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
        timed = {"update": 0.0}
        local_step = inner.step

        def update():  # the torch optimizer's step, timed: not gossamer's overhead
            start = time.perf_counter()
            local_step()
            timed["update"] += time.perf_counter() - start

        inner.step = update
        opt = gossamer.torch.Optimizer(inner, peer)
        if not peer.start():
            raise SystemExit("gossamer: joined no one")
        shard = lambda: peer.shard  # noqa: E731
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port, rank=rank,
                                world_size=args.processes)
        ddp = DistributedDataParallel(model)
        inner = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
        shard = lambda: (rank, args.processes)  # noqa: E731

    batches = example.Batches(train_x, train_y, args.batch, args.seed)
    trained, in_step, reached, accuracy, step = 0.0, 0.0, None, 0.0, 0
    curve = []
    while step < steps:
        begin = time.perf_counter()
        x, y = batches.next(shard())
        if args.worker == "gossamer":
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            call = time.perf_counter()
            stepped = opt.step(loss=loss, samples=len(y))
            in_step += time.perf_counter() - call
            if not stepped:
                break
        else:
            inner.zero_grad()
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()  # the gradient all-reduce
            inner.step()
        step += 1
        trained += time.perf_counter() - begin
        if step % args.eval_every == 0:
            stop = False
            if rank == 0:
                correct, n, _ = evaluate(model, 0)
                accuracy = correct / n
                curve.append((step, trained, accuracy))
                if reached is None and accuracy >= args.target:
                    reached = trained
                    stop = True
                    open(stop_file, "w").close()
            if args.worker == "gossamer":
                if os.path.exists(stop_file):
                    peer.stop()
            else:
                flag = torch.tensor([1 if stop else 0])
                dist.broadcast(flag, 0)
                if flag.item():
                    break

    out = {"rank": rank, "steps": step, "trained_s": trained, "reached_s": reached,
           "accuracy": accuracy, "curve": curve, "step_ms": 1000 * trained / max(step, 1)}
    if args.worker == "gossamer":
        # The runtime's own account of every wait on the others in its steps (gathers, requests,
        # pulls, the algorithm's inbox waits, send back-pressure): read before finish(), whose
        # barrier waits are outside the steps timed here.
        wait = peer.status()["comm_wait_seconds"]
        result = peer.finish()
        out.update(comm_wait_s=wait, update_s=timed["update"], in_step_s=in_step,
                   overhead=(in_step - timed["update"] - wait) / max(trained, 1e-9),
                   bytes_sent=result["bytes_sent"])
    else:
        dist.destroy_process_group()
    print(json.dumps(out), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(kind, args):
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.open(os.path.join(tmp, "secret"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(32).hex())
        port = free_port()
        common = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--dir", tmp,
                  "--port", str(port)]
        for name in ("processes", "batch", "lr", "momentum", "target", "max_epochs", "eval_every",
                     "algorithm", "seed"):
            common += ["--" + name.replace("_", "-"), str(getattr(args, name))]
        started = time.time()
        processes = []
        for rank in range(args.processes):
            processes.append(subprocess.Popen(common + ["--rank", str(rank)], stdout=subprocess.PIPE, text=True))
            if kind == "gossamer" and rank == 0:
                while not os.path.exists(os.path.join(tmp, "seed")):
                    if processes[0].poll() is not None:
                        raise SystemExit("gossamer rank 0 exited with %s" % processes[0].returncode)
                    time.sleep(0.05)
        results = []
        for p in processes:
            out, _ = p.communicate()
            if p.returncode != 0:
                raise SystemExit("%s worker exited with %s" % (kind, p.returncode))
            results.append(json.loads(out.splitlines()[-1]))
        return {"wall_s": time.time() - started, "ranks": results}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--max-epochs", type=float, default=8)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--algorithm", default="gosgd")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, alternating")
    parser.add_argument("--json", default="", help="also write the results here")
    parser.add_argument("--worker", choices=["gossamer", "ddp"], help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dir", default="", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        raise SystemExit("this torch has no torch.distributed with gloo: DDP cannot be measured")
    print("MLP 784-256-256-10, Fashion-MNIST, %d processes, batch %d each, SGD lr %g momentum %g"
          % (args.processes, args.batch, args.lr, args.momentum))
    rounds, ratios = [], []
    for _ in range(args.repeat):
        runs = {kind: run(kind, args) for kind in ("gossamer", "ddp")}
        rounds.append(runs)
        g, d = runs["gossamer"]["ranks"][0], runs["ddp"]["ranks"][0]
        for kind, r in (("gossamer " + args.algorithm, g), ("DDP gloo", d)):
            reached = "%.1f s" % r["reached_s"] if r["reached_s"] is not None else "not reached"
            print("  %-16s %5d steps, %.2f ms/step, %.1f%% at the end; %.0f%% test accuracy: %s"
                  % (kind, r["steps"], r["step_ms"], 100 * r["accuracy"], 100 * args.target, reached))
        if g["reached_s"] is not None and d["reached_s"] is not None:
            ratios.append(g["reached_s"] / d["reached_s"])
            print("  time to target, gossamer / DDP: %.2f" % ratios[-1])
        overheads = [r["overhead"] for r in runs["gossamer"]["ranks"]]
        print("  gossamer binding overhead (in its step, outside its waits on the others and the torch "
              "optimizer): %.2f%% of the step (max over ranks %.2f%%)"
              % (100 * sum(overheads) / len(overheads), 100 * max(overheads)), flush=True)
    if len(ratios) > 1:
        print("time to target, gossamer / DDP, over %d runs where both reached it: median %.2f, "
              "worst %.2f" % (len(ratios), sorted(ratios)[len(ratios) // 2], max(ratios)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "rounds": rounds, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
