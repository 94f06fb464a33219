"""Starts N peer processes of train.py on this machine, joined by seeds, and reports.

    PYTHONPATH=build/python python3 examples/pytorch/launch.py --processes 4 [train.py options]

The first process starts the cluster; the others name it as their seed. A fresh cluster secret
goes to a private temporary file. Prints each peer's test accuracy and the run's figures, and
with --json one JSON line of them; exits non-zero when a process failed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print one JSON line of the results")
    args, rest = parser.parse_known_args()
    if args.processes < 1:
        parser.error("--processes must be at least 1")

    with tempfile.TemporaryDirectory() as tmp:
        secret = os.path.join(tmp, "secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(32).hex())
        common = [sys.executable, os.path.join(HERE, "train.py"), "--secret-file", secret,
                  "--min-peers", str(args.processes)] + rest
        first = subprocess.Popen(common + ["--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
        line = first.stdout.readline()
        if not line.startswith("listening on "):
            first.wait()
            sys.exit("launch: the first peer did not start (exit %s)" % first.returncode)
        seed = line.split()[-1]
        others = [subprocess.Popen(common + ["--listen", "127.0.0.1:0", "--seeds", seed],
                                   stdout=subprocess.PIPE, text=True)
                  for _ in range(args.processes - 1)]
        results, failed = [], False
        for process in [first] + others:
            out, _ = process.communicate()
            lines = [l for l in out.splitlines() if l.startswith("{")]
            if process.returncode != 0 or not lines:
                failed = True
                print("launch: a peer exited with %s" % process.returncode, file=sys.stderr)
                continue
            results.append(json.loads(lines[-1]))

    for r in results:
        print("peer %016x: %d steps in %.1f s, test accuracy %.2f%%, %.1f MB sent"
              % (r["peer"], r["steps"], r["wall_seconds"], 100 * r["test_accuracy"], r["bytes_sent"] / 1e6))
    if results:
        accuracies = [r["test_accuracy"] for r in results]
        print("%d peers: test accuracy min %.2f%% mean %.2f%%"
              % (len(results), 100 * min(accuracies), 100 * sum(accuracies) / len(accuracies)))
    if args.json:
        print(json.dumps({"peers": results}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
