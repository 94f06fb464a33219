#!/usr/bin/python3
"""The simulator against reality: a Markdown table of the same experiments run for real
(`gossamer-bench convergence --config C --out REAL`) and simulated (`gossamer-bench simulate
--config C --out SIM`), read from the two summary.csv files: time to the target accuracy, bytes
per peer to the target and over the whole run, the whole run's time, and final accuracy, each
with the simulator's error relative to the real run.

Usage: compare_simulation.py REAL_DIR SIM_DIR [TOLERANCE]   (TOLERANCE: 0.15 by default)
"""
import csv
import sys
from pathlib import Path


def rows(directory):
    with open(Path(directory) / "summary.csv") as f:
        return {row["experiment"]: row for row in csv.DictReader(f)}


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def error(real, sim):
    if real is None or sim is None or real == 0:
        return None
    return (sim - real) / real


def cell(value, fmt):
    return "-" if value is None else format(value, fmt)


def main():
    real, sim = rows(sys.argv[1]), rows(sys.argv[2])
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 0.15
    print("| experiment | time to target real / sim (s) | error | bytes/peer to target real / sim "
          "(MB) | error | bytes/peer real / sim (MB) | error | run time real / sim (s) | error "
          "| final accuracy real / sim |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for name, r in real.items():
        s = sim.get(name)
        if s is None:
            continue
        pairs = [(number(r["time_to_target_s"]), number(s["time_to_target_s"])),
                 (number(r["bytes_to_target"]), number(s["bytes_to_target"])),
                 (number(r["bytes_per_peer"]), number(s["bytes_per_peer"])),
                 (number(r["wall_s"]), number(s["wall_s"]))]
        errors = [error(a, b) for a, b in pairs]
        worst = max([worst] + [abs(e) for e in errors if e is not None])
        mb = lambda v: None if v is None else v / 1e6  # noqa: E731
        print(f"| {name} | {cell(pairs[0][0], '.1f')} / {cell(pairs[0][1], '.1f')} "
              f"| {cell(errors[0] and 100 * errors[0], '+.1f')}% "
              f"| {cell(mb(pairs[1][0]), '.2f')} / {cell(mb(pairs[1][1]), '.2f')} "
              f"| {cell(errors[1] and 100 * errors[1], '+.1f')}% "
              f"| {cell(mb(pairs[2][0]), '.2f')} / {cell(mb(pairs[2][1]), '.2f')} "
              f"| {cell(errors[2] and 100 * errors[2], '+.1f')}% "
              f"| {cell(pairs[3][0], '.1f')} / {cell(pairs[3][1], '.1f')} "
              f"| {cell(errors[3] and 100 * errors[3], '+.1f')}% "
              f"| {100 * float(r['final_accuracy']):.2f}% / {100 * float(s['final_accuracy']):.2f}% |")
    print()
    print(f"Largest error: {100 * worst:.1f}% (tolerance {100 * tolerance:.0f}%): "
          f"{'within' if worst <= tolerance else 'NOT within'} tolerance.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
