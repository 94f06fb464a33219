#!/usr/bin/env python3
"""Figures of a `gossamer-bench convergence` run (called by the bench; runnable by hand).

    plot_convergence.py OUT_DIR TARGET

Reads OUT_DIR/points.csv and, for every group of experiments on one network with one peer count
and split, draws four figures with one line per algorithm (and topology, when several were run):
consensus accuracy against wall time, against steps and against bytes sent per peer, and the
consensus distance against steps. Writes them as PNG into OUT_DIR and lists their file names in
OUT_DIR/figures.txt.
"""
import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

FIGURES = [
    # (file prefix, x column, x label, y column, y label, log y)
    ("accuracy-vs-time", "wall_s", "wall time (s)", "accuracy", "consensus test accuracy", False),
    ("accuracy-vs-steps", "mean_step", "steps per peer", "accuracy", "consensus test accuracy", False),
    ("accuracy-vs-bytes", "bytes_per_peer", "MB sent per peer", "accuracy", "consensus test accuracy", False),
    ("distance-vs-steps", "mean_step", "steps per peer", "consensus_distance",
     "consensus distance (mean ||w_i - mean w||^2)", True),
]


def main() -> int:
    out = Path(sys.argv[1])
    target = float(sys.argv[2]) if len(sys.argv) > 2 else None
    # The time axis' label: "wall time (s)", or the simulator's "virtual time (s)".
    time_label = sys.argv[3] if len(sys.argv) > 3 else None
    rows = list(csv.DictReader(open(out / "points.csv")))
    groups = defaultdict(lambda: defaultdict(list))
    topologies = defaultdict(set)
    for row in rows:
        key = (row["network"], row["peers"], row["split"])
        groups[key][(row["algorithm"], row["topology"])].append(row)
        topologies[key].add(row["topology"])
    written = []
    for (network_spec, peers, split), lines in sorted(groups.items()):
        several_topologies = len(topologies[(network_spec, peers, split)]) > 1
        # A profile file by its stem: "../nets/my-net.net" -> "my-net".
        network = Path(network_spec).stem if "/" in network_spec else network_spec
        for prefix, xcol, xlabel, ycol, ylabel, logy in FIGURES:
            if xcol == "wall_s" and time_label:
                xlabel = time_label
            fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
            for (algorithm, topology), points in sorted(lines.items()):
                xs = [float(p[xcol]) for p in points]
                ys = [float(p[ycol]) for p in points]
                if xcol == "bytes_per_peer":
                    xs = [x / 1e6 for x in xs]
                if ycol == "accuracy":
                    ys = [100 * y for y in ys]
                label = f"{algorithm} ({topology})" if several_topologies else algorithm
                ax.plot(xs, ys, marker=".", linewidth=1.4, markersize=4, label=label)
            if ycol == "accuracy" and target:
                ax.axhline(100 * target, color="grey", linestyle=":", linewidth=1)
                ax.set_ylim(bottom=max(0, 100 * target - 25))
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel + (" (%)" if ycol == "accuracy" else ""))
            ax.set_title(f"{network}, {peers} peers, {split} split")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            name = f"{prefix}-{network}-{peers}p-{split.replace(':', '-')}.png".replace("/", "_")
            fig.savefig(out / name)
            plt.close(fig)
            written.append(name)
    (out / "figures.txt").write_text("".join(n + "\n" for n in written))
    print(f"wrote {len(written)} figures to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
