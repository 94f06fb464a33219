#!/usr/bin/env python3
"""The benchmark tables of the READMEs, made from the committed results in bench/results/.

A README marks where a table goes with two comment lines; between them this script writes the
command that made the results (from the run's command.txt, or its report.md's "Produced by"
line), how they were evaluated (from the run's experiments.conf) and the table:

    <!-- table: seed002 -->
    ...generated...
    <!-- /table -->

Every table comes from ONE run's summary.csv (one command's one run): TABLES below says which
run, which rows and which columns. Figures are printed as the run wrote them, never edited.

    bench/readme_tables.py --check    exit 1, with a diff, when a README differs from its results
    bench/readme_tables.py --write    rewrite the marked tables in place
"""

import argparse
import csv
import difflib
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READMES = ["README.md", "bench/README.md", "bench/results/uneven/README.md",
           "bench/results/uneven256/README.md"]
MARKER = re.compile(r"^<!-- table: ([a-z0-9-]+) -->$")
END = "<!-- /table -->"


# ---- reading a run ----------------------------------------------------------------------------

def read_run(folder):
    """The rows of a run's summary.csv (dicts), its command and its [run] settings."""
    path = os.path.join(ROOT, folder)
    with open(os.path.join(path, "summary.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    command = None
    if os.path.exists(os.path.join(path, "command.txt")):
        with open(os.path.join(path, "command.txt")) as f:
            command = f.read().strip()
    else:
        with open(os.path.join(path, "report.md")) as f:
            found = re.search(r"Produced by `([^`]+)`", f.read())
            command = found.group(1) if found else None
    if not command:
        raise SystemExit("%s: no command.txt and no 'Produced by' line in report.md" % folder)
    settings = {}
    conf = os.path.join(path, "experiments.conf")
    named = re.search(r"--config (\S+)", command)
    if not os.path.exists(conf) and named:
        conf = os.path.join(ROOT, named.group(1))  # the file the command ran
    if os.path.exists(conf):
        section = None
        with open(conf) as f:
            for line in f:
                line = line.split("#")[0].strip()
                if line.startswith("["):
                    section = line.strip("[]")
                elif "=" in line:
                    key, value = (part.strip() for part in line.split("=", 1))
                    if section == "run":
                        settings[key] = value
                    elif key == "round-seconds" and value != "off":
                        settings["time-boxed"] = "yes"  # evaluated at round boundaries
    return rows, command, settings


def evaluation(settings, command=""):
    """How the run evaluated its consensus: the resolution of its times to a target."""
    seconds = float(settings.get("eval-seconds", "0") or 0)
    steps = int(settings.get("eval-every-steps", "0") or 0)
    if seconds > 0:
        clock = "virtual time" if " simulate " in command else "wall time"
        if settings.get("time-boxed"):
            return ("evaluated every %s s of %s, each time the latest round's merged model: times "
                    "to a target resolve to the rounds" % (settings["eval-seconds"], clock))
        return ("evaluated every %s s of %s: times to a target resolve to %s s"
                % (settings["eval-seconds"], clock, settings["eval-seconds"]))
    if steps > 0:
        return ("evaluated at every peer's step %d, %d, ...: times to a target are exact to %s"
                % (steps, 2 * steps, "the step" if steps == 1 else "%d steps" % steps))
    return "evaluated as the run's report says"


# ---- formatting ---------------------------------------------------------------------------------

def number(row, key):
    value = row.get(key, "")
    if value in ("", "-", None):
        return math.nan
    return float(value)


def fmt(value, pattern, missing="-"):
    return missing if math.isnan(value) else pattern % value


def seconds(row, key="time_to_target_s"):
    return fmt(number(row, key), "%.1f s", "not reached")


def percent(row, key, pattern="%.2f%%"):
    return fmt(100 * number(row, key), pattern)


def megabytes(row, key="bytes_per_peer"):
    value = number(row, key) / 1e6
    if math.isnan(value):
        return "-"
    return "{:,.0f}".format(value) if value >= 100 else "%.1f" % value


def speedup(row):
    key = "speedup_vs_baseline" if "speedup_vs_baseline" in row else "speedup_vs_allreduce"
    return fmt(number(row, key), "%.2fx")


def final_accuracy(row):
    text = percent(row, "final_accuracy")
    if row.get("stopped_early") == "1":
        text += " (stopped at %s steps)" % row["steps"]
    return text


def options(row):
    """The options the experiment set, and what auto chose (summary.csv's chosen column)."""
    given = row.get("options", "").replace('"', "")
    chosen = row.get("chosen", "").replace('"', "")
    if chosen:
        return (given + "; " if given else "") + "auto: " + chosen
    return given or "defaults"


def one(rows, **where):
    """The one row whose columns have the given values."""
    found = [r for r in rows if all(r.get(k) == v for k, v in where.items())]
    if len(found) != 1:
        raise SystemExit("expected one row for %s, found %d" % (where, len(found)))
    return found[0]


def codec(row):
    """The codec of a row: its column, or (older runs) the end of the experiment's name."""
    if row.get("compress"):
        return row["compress"]
    extra = [p for p in row["experiment"].split("/")[5:] if not re.fullmatch(r"[0-9.]+ms", p)]
    return extra[0] if extra else "none"


def markdown(header, rows, align):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


# ---- the tables ---------------------------------------------------------------------------------

def seed002(rows):
    header = ["algorithm", "options", "scalability", "utilization", "comm wait",
              "final accuracy", "MB sent per peer", "peak memory / model"]
    body = []
    for r in rows:
        body.append([r["algorithm"], options(r), fmt(number(r, "scalability"), "%.2f"),
                     percent(r, "utilization", "%.0f%%"),
                     percent(r, "comm_wait_fraction", "%.1f%%"), final_accuracy(r), megabytes(r),
                     fmt(number(r, "peak_memory_vs_model"), "%.1fx")])
    return markdown(header, body, "llrrrrrr")


def seed002_simulated(rows):
    """The seed-002 regime in virtual time: every step costs exactly its emulated compute."""
    header = ["algorithm", "options", "virtual time of the run", "utilization", "comm wait",
              "final accuracy", "MB sent per peer"]
    body = []
    for r in rows:
        body.append([r["algorithm"], options(r), seconds(r, "wall_s"),
                     percent(r, "utilization", "%.1f%%"),
                     percent(r, "comm_wait_fraction", "%.1f%%"), final_accuracy(r), megabytes(r)])
    return markdown(header, body, "llrrrrr")


def latency(rows):
    header = ["algorithm", "options", "steps to 80%: lan / geo", "lan: time to 80%",
              "geo: time to 80%", "geo / lan", "geo: utilization", "geo: comm wait",
              "geo: final accuracy"]
    body = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        lan = one(rows, algorithm=algorithm, network="lan")
        geo = one(rows, algorithm=algorithm, network="geo")
        ratio = number(geo, "time_to_target_s") / number(lan, "time_to_target_s")
        steps = "%s / %s" % (fmt(number(lan, "steps_to_target"), "%.0f"),
                             fmt(number(geo, "steps_to_target"), "%.0f"))
        body.append([algorithm, options(geo), steps, seconds(lan), seconds(geo),
                     fmt(ratio, "%.2fx"), percent(geo, "utilization", "%.0f%%"),
                     percent(geo, "comm_wait_fraction", "%.1f%%"),
                     final_accuracy(geo)])
    return markdown(header, body, "llrrrrrrr")


def full_fast_steps(rows):
    header = ["algorithm", "lan: time to 85%", "lan: speed-up", "wan: time", "wan: speed-up",
              "geo: time", "geo: speed-up", "geo: final accuracy", "geo: MB/peer"]
    body = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        by = {n: one(rows, algorithm=algorithm, network=n, split="iid") for n in ("lan", "wan", "geo")}
        body.append([algorithm, seconds(by["lan"]), speedup(by["lan"]), seconds(by["wan"]),
                     speedup(by["wan"]), seconds(by["geo"]), speedup(by["geo"]),
                     final_accuracy(by["geo"]), megabytes(by["geo"])])
    return markdown(header, body, "lrrrrrrrr")


def compression(rows):
    codecs = ["none", "int8:256", "int4:256", "topk:0.01"]
    header = ["algorithm", "accuracy: float32", "int8", "int4", "top-k 1%",
              "bytes against float32: int8", "top-k 1%"]
    body = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        by = {codec(r): r for r in rows if r["algorithm"] == algorithm}
        base = number(by["none"], "bytes_per_peer")
        body.append([algorithm] + [final_accuracy(by[c]) for c in codecs] +
                    [fmt(number(by[c], "bytes_per_peer") / base, "%.3f") for c in ("int8:256", "topk:0.01")])
    return markdown(header, body, "lrrrrrr")


def full_geo_300ms(rows):
    header = ["algorithm", "lan: time to 80%", "geo: time to 80%", "geo: speed-up",
              "geo: utilization", "geo: final accuracy", "geo: MB/peer"]
    body = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        lan = one(rows, algorithm=algorithm, network="lan")
        geo = one(rows, algorithm=algorithm, network="geo")
        body.append([algorithm, seconds(lan), seconds(geo), speedup(geo),
                     percent(geo, "utilization", "%.0f%%"), final_accuracy(geo), megabytes(geo)])
    return markdown(header, body, "lrrrrrr")


def fast_steps_geo(rows):
    header = ["algorithm", "options", "time to 85%", "speed-up", "comm wait", "final accuracy",
              "MB/peer"]
    body = [[r["algorithm"], options(r), seconds(r), speedup(r),
             percent(r, "comm_wait_fraction", "%.0f%%"), final_accuracy(r), megabytes(r)]
            for r in rows]
    return markdown(header, body, "llrrrrr")


def memory16(rows):
    """Memory at scale: the largest peer's tracked peak over the model, the process's peak RSS."""
    header = ["algorithm", "options", "steps a peer", "peak memory / model", "process peak RSS"]
    body = [[r["algorithm"], options(r), r["steps"], fmt(number(r, "peak_memory_vs_model"), "%.1fx"),
             fmt(number(r, "peak_rss_bytes") / 2**30, "%.1f GiB")] for r in rows]
    return markdown(header, body, "llrrr")


def codec_columns(rows, r):
    """algorithm, codec, final accuracy, MB sent per peer, and bytes against its float32 run."""
    own = next(o for o in rows if o["algorithm"] == r["algorithm"] and codec(o) == "none")
    return [r["algorithm"], "none" if codec(r) == "none" else "`%s`" % codec(r), final_accuracy(r),
            megabytes(r), fmt(number(r, "bytes_per_peer") / number(own, "bytes_per_peer"), "%.3f")]


CODEC_HEADER = ["algorithm", "codec", "final accuracy", "MB sent per peer", "against its float32"]


def compression_detail(rows):
    header = CODEC_HEADER + ["MB to 85%", "float32 allreduce-sgd's MB to 85% over these"]
    baseline = number(next(r for r in rows if r["algorithm"] == "allreduce-sgd"
                           and codec(r) == "none"), "bytes_to_target")
    body = []
    for r in rows:
        to = number(r, "bytes_to_target")
        body.append(codec_columns(rows, r) +
                    [fmt(to / 1e6, "%.1f", "not reached"), fmt(baseline / to, "%.0fx")])
    return markdown(header, body, "llrrrrr")


def compression_networks(rows):
    codecs = ["none", "int8:256", "topk:0.01"]
    networks = list(dict.fromkeys(r["network"] for r in rows))
    header = ["algorithm"] + ["%s: %s" % (n, "float32" if c == "none" else "`%s`" % c)
                              for n in networks for c in codecs]
    body = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        by = {(r["network"], codec(r)): r for r in rows if r["algorithm"] == algorithm}
        body.append([algorithm] + [seconds(by[(n, c)]) for n in networks for c in codecs])
    return markdown(header, body, "l" + "r" * (len(header) - 1))


def compression_gossip(rows):
    return markdown(CODEC_HEADER, [codec_columns(rows, r) for r in rows], "llrrr")


def chaos_processes(rows):
    """Per algorithm, its seeds' runs together: faults, violations, hangs, the latest exit."""
    header = ["algorithm", "seeds", "faults (kills)", "invariant violations", "hangs",
              "latest exit after the last step", "accuracy with faults"]
    body = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        runs = [r for r in rows if r["algorithm"] == algorithm]
        done = [r for r in runs if r["faults"] != "-"]
        exits = [number(r, "max_exit_after_last_step_s") for r in done]
        accuracy = [number(r, "accuracy_with_faults") for r in done]
        body.append([
            algorithm,
            ", ".join(r["seed"] for r in runs),
            "%d (%d)" % (sum(int(r["faults"]) for r in done), sum(int(r["kills"]) for r in done)),
            str(sum(int(r["invariant_violations"]) for r in done) + len(runs) - len(done)),
            str(sum(int(r["hangs"]) for r in done)),
            fmt(max(exits) if exits else math.nan, "%.2f s"),
            "%s to %s" % (fmt(100 * min(accuracy), "%.2f%%"), fmt(100 * max(accuracy), "%.2f%%"))
            if accuracy else "-",
        ])
    return markdown(header, body, "llrrrrr")


def uneven(rows):
    """Peers of uneven speed: each experiment against its even reference (the fastest step)."""
    header = ["algorithm", "options", "time to target", "time_vs_ideal",
              "min_fast_peer_utilization", "final accuracy", "the even reference"]
    body = []
    for r in rows:
        body.append([r["algorithm"], options(r), seconds(r), fmt(number(r, "time_vs_ideal"), "%.3f"),
                     fmt(number(r, "min_fast_peer_utilization"), "%.3f"), final_accuracy(r),
                     seconds(r, "reference_time_to_target_s")])
    return markdown(header, body, "llrrrrr")


# name -> (the folder of the one run it is made from, the function that makes it)
TABLES = {
    "seed002": ("bench/results/seed002", seed002),
    "seed002-auto": ("bench/results/seed002-auto/real", seed002),
    "seed002-auto-simulated": ("bench/results/seed002-auto/simulated", seed002_simulated),
    "latency": ("bench/results/latency", latency),
    "full-fast-steps": ("bench/results/full/fast-steps", full_fast_steps),
    "compression": ("bench/results/compression", compression),
    "full-geo-300ms": ("bench/results/full/geo-300ms", full_geo_300ms),
    "fast-steps-geo": ("bench/results/fast-steps-geo", fast_steps_geo),
    "memory16": ("bench/results/memory16", memory16),
    "compression-detail": ("bench/results/compression", compression_detail),
    "compression-wan-geo": ("bench/results/compression/wan-geo", compression_networks),
    "compression-gossip": ("bench/results/compression/gossip", compression_gossip),
    "chaos-processes": ("bench/results/chaos-processes", chaos_processes),
    "uneven-timeboxed": ("bench/results/uneven/report/timeboxed", uneven),
    "uneven-stepped": ("bench/results/uneven/report/stepped", uneven),
    "uneven-budget": ("bench/results/uneven/report/budget", uneven),
    "uneven-timeboxed-h10": ("bench/results/uneven/report/timeboxed-h10", uneven),
    "uneven-backups": ("bench/results/uneven/report/backups", uneven),
    "uneven-backups2": ("bench/results/uneven/report/backups2", uneven),
    "uneven-backups-even": ("bench/results/uneven/report/backups-even", uneven),
    "uneven-even": ("bench/results/uneven/report/even", uneven),
    "uneven256-timeboxed": ("bench/results/uneven256/report/timeboxed", uneven),
    "uneven256-stepped": ("bench/results/uneven256/report/stepped", uneven),
    "uneven-quorum": ("bench/results/uneven/report/quorum", uneven),
    "uneven-dts-backups": ("bench/results/uneven/report/dts/dts-backups", uneven),
    "uneven-dts-backups2": ("bench/results/uneven/report/dts/dts-backups2", uneven),
    "uneven256-quorum": ("bench/results/uneven256/report/quorum", uneven),
}


def render(name, readme):
    """The lines between a table's markers: its command, its evaluation, the table."""
    if name not in TABLES:
        raise SystemExit("%s: unknown table '%s' (known: %s)" % (readme, name, ", ".join(TABLES)))
    folder, table = TABLES[name]
    rows, command, settings = read_run(folder)
    link = os.path.relpath(os.path.join(ROOT, folder), os.path.dirname(os.path.join(ROOT, readme)))
    lines = ["", "`%s` ([results](%s/report.md); %s)" % (command, link, evaluation(settings, command)), ""]
    return lines + table(rows) + [""]


def regenerate(readme):
    """The README's text with every marked table made anew."""
    with open(os.path.join(ROOT, readme)) as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        found = MARKER.match(lines[i])
        i += 1
        if not found:
            continue
        end = next((j for j in range(i, len(lines)) if lines[j] == END), None)
        if end is None:
            raise SystemExit("%s: table '%s' has no '%s' line" % (readme, found.group(1), END))
        out += render(found.group(1), readme)
        out.append(END)
        i = end + 1
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when a README differs")
    mode.add_argument("--write", action="store_true", help="rewrite the marked tables")
    parser.add_argument("readmes", nargs="*", default=READMES)
    args = parser.parse_args()
    stale = []
    for readme in args.readmes:
        with open(os.path.join(ROOT, readme)) as f:
            current = f.read()
        made = regenerate(readme)
        if made == current:
            continue
        if args.write:
            with open(os.path.join(ROOT, readme), "w") as f:
                f.write(made)
            print("wrote %s" % readme)
        else:
            stale.append(readme)
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(True), made.splitlines(True), readme, readme + " (from results)"))
    if stale:
        print("\nthe tables of %s differ from what bench/readme_tables.py makes of bench/results/; "
              "run bench/readme_tables.py --write" % ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
