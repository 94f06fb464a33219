#!/usr/bin/env python3
"""The table of run.sh's files: each figure for old and new, round 1 and 2, and new / old."""
import csv
import json
import pathlib
import sys

here = pathlib.Path(sys.argv[1])


def last_json(path):
    lines = [l for l in path.read_text().splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


rows = []  # (figure, unit, old1, old2, new1, new2)


def add(figure, unit, read):
    values = {}
    for which in ("old", "new"):
        for r in (1, 2):
            values[which, r] = read(which, r)
    rows.append((figure, unit, values))


for model in ("mlp", "lenet", "cnn"):
    add(f"models: {model} step p50", "ms",
        lambda w, r, m=model: last_json(here / f"models-{w}-{r}.txt")[m]["step_p50_us"] / 1e3)
add("transport: tcp bulk", "GB/s", lambda w, r: last_json(here / f"transport-{w}-{r}.txt")["bulk_gbps"])
add("transport: tcp rtt p50", "us", lambda w, r: last_json(here / f"transport-{w}-{r}.txt")["rtt_p50_us"])
add("transport: tls bulk", "GB/s", lambda w, r: last_json(here / f"transport-{w}-{r}.txt")["tls_bulk_gbps"])


def quick(w, r, algorithm, column):
    with open(here / f"quick-{w}-{r}" / "summary.csv") as f:
        for row in csv.DictReader(f):
            if row["algorithm"] == algorithm:
                return float(row[column])
    raise KeyError(algorithm)


for algorithm in ("allreduce-sgd", "gosgd", "dpsgd", "easgd"):
    add(f"quick-lan: {algorithm} wall", "s", lambda w, r, a=algorithm: quick(w, r, a, "wall_s"))
    add(f"quick-lan: {algorithm} final accuracy", "",
        lambda w, r, a=algorithm: quick(w, r, a, "final_accuracy"))
add("simulate 1,024 peers: wall", "s",
    lambda w, r: last_json(here / f"simulate-{w}-{r}.json")["wall_seconds"])
add("simulate 1,024 peers: max RSS", "MiB",
    lambda w, r: last_json(here / f"simulate-{w}-{r}.json")["max_rss_mib"])
add("simulate 1,024 peers: final accuracy", "",
    lambda w, r: last_json(here / f"simulate-{w}-{r}.json")["final_accuracy"])

print("| figure | unit | old 1 | old 2 | new 1 | new 2 | new / old (means) |")
print("|---|---|---|---|---|---|---|")
for figure, unit, v in rows:
    old = (v["old", 1] + v["old", 2]) / 2
    new = (v["new", 1] + v["new", 2]) / 2
    ratio = f"{new / old:.3f}" if old else "-"
    cells = " | ".join(f"{v[k]:.4g}" for k in (("old", 1), ("old", 2), ("new", 1), ("new", 2)))
    print(f"| {figure} | {unit} | {cells} | {ratio} |")
for w in ("old", "new"):
    for r in (1, 2):
        sha = last_json(here / f"simulate-{w}-{r}.json").get("report_sha256", "")
        print(f"\nsimulate {w} {r}: report_sha256 {sha}")
