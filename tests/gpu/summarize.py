"""The end of check.sh: reads RESULTS_DIR/parts.tsv (one line per part: name, kind, status,
seconds, reason) and each part's log, writes RESULTS_DIR/check.json and prints a human summary.

    python3 summarize.py RESULTS_DIR

A part's figures are the last JSON line of its log (gossamer-bench --json, gossamer-peer --json,
torch_peers.py --json), nested objects flattened to "a.b" keys, or the doctest summary of the
conformance parts. The CPU and CUDA training runs of each model are compared: the difference of
their test accuracies in points, against the target of 0.5 (reported, not asserted).
"""

import json
import os
import re
import sys

ACCURACY_TARGET_POINTS = 0.5


def flatten(obj, prefix=""):
    out = {}
    for key, value in obj.items():
        if isinstance(value, dict):
            out.update(flatten(value, prefix + key + "."))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[prefix + key] = value
    return out


def figures_of(log_path):
    if not os.path.exists(log_path):
        return {}
    with open(log_path, errors="replace") as f:
        lines = f.read().splitlines()
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return flatten(json.loads(line))
            except ValueError:
                break
    for line in reversed(lines):
        m = re.search(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed", line)
        if m:
            return {"test_cases": int(m.group(1)), "passed": int(m.group(2)), "failed": int(m.group(3))}
    return {}


def read_parts(results):
    parts = {}
    with open(os.path.join(results, "parts.tsv")) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5:
                continue
            name, kind, status, seconds, reason = fields
            parts[name] = {"kind": kind, "status": status, "seconds": float(seconds), "reason": reason,
                           "figures": figures_of(os.path.join(results, name + ".log"))}
    return parts


def compare_accuracies(parts):
    comparisons = {}
    for model in ("mlp", "cnn"):
        cpu, cuda = parts.get("train-cpu-" + model), parts.get("train-cuda-" + model)
        if not cpu or not cuda or cpu["status"] != "PASS" or cuda["status"] != "PASS":
            continue
        a, b = cpu["figures"].get("test_accuracy"), cuda["figures"].get("test_accuracy")
        if a is None or b is None:
            continue
        points = abs(a - b) * 100
        comparisons[model] = {"cpu_accuracy": a, "cuda_accuracy": b, "difference_points": round(points, 3),
                              "target_points": ACCURACY_TARGET_POINTS, "met": points <= ACCURACY_TARGET_POINTS}
    return comparisons


def ratio(figures, key):
    value = figures.get(key)
    return "-" if value is None else "%.3f" % value


def summary_lines(parts, comparisons):
    lines = []
    kernels = parts.get("bench-kernels", {})
    if kernels.get("status") == "PASS":
        f = kernels["figures"]
        lines.append("kernels on CUDA, ratio to device-to-device memcpy (%.1f GB/s) at %s floats, target >= %s:"
                     % (f.get("memcpy_gbps", 0), f.get("floats", "?"), f.get("target_ratio", "?")))
        lines.append("  weightedSum2 %s, weightedSum4 %s, elasticPull %s, momentumStep %s" % (
            ratio(f, "ratio_vs_memcpy"), ratio(f, "ratio_weighted_sum4"), ratio(f, "ratio_elastic_pull"),
            ratio(f, "ratio_momentum")))
        lines.append("  codecs (encode with error feedback + decode): int8 %s, int4 %s, fp16 %s, topk sampled %s, "
                     "topk exact %s" % (ratio(f, "codec_int8_ratio_vs_memcpy"), ratio(f, "codec_int4_ratio_vs_memcpy"),
                                        ratio(f, "codec_fp16_ratio_vs_memcpy"), ratio(f, "codec_topk_ratio_vs_memcpy"),
                                        ratio(f, "codec_topk_exact_ratio_vs_memcpy")))
    models = parts.get("bench-models", {})
    if models.get("status") == "PASS":
        f = models["figures"]
        lines.append("models on CUDA, training step vs bare cuBLAS GEMM of its shapes, target >= %s:"
                     % f.get("target_ratio", "?"))
        for model in ("mlp", "lenet", "cnn"):
            if model + ".ratio_vs_gemm" in f:
                lines.append("  %-5s ratio %s, %.1f GFLOP/s vs %.1f, %.0f samples/s" % (
                    model, ratio(f, model + ".ratio_vs_gemm"), f.get(model + ".gflops", 0),
                    f.get(model + ".gemm_gflops", 0), f.get(model + ".samples_per_s", 0)))
    for model in ("mlp", "cnn"):
        runs = []
        for device in ("cpu", "cuda"):
            part = parts.get("train-%s-%s" % (device, model), {})
            if part.get("status") == "PASS":
                f = part["figures"]
                runs.append("%s %.2f%% in %.1f s" % (device, 100 * f.get("test_accuracy", 0), f.get("wall_s", 0)))
        if runs:
            line = "training %s, 4 peers: %s" % (model, ", ".join(runs))
            if model in comparisons:
                c = comparisons[model]
                line += "; CPU vs CUDA %.2f points (target <= %s: %s)" % (
                    c["difference_points"], ACCURACY_TARGET_POINTS, "met" if c["met"] else "NOT met")
            lines.append(line)
    for device in ("cpu", "cuda"):
        part = parts.get("torch-peers-" + device, {})
        if part.get("status") == "PASS":
            f = part["figures"]
            lines.append("torch module on %s, %s processes: test accuracy min %.2f%% mean %.2f%%, %d steps, %.1f s" % (
                device, f.get("processes", "?"), 100 * f.get("accuracy_min", 0), 100 * f.get("accuracy_mean", 0),
                f.get("steps", 0), f.get("seconds", 0)))
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py RESULTS_DIR")
    results = sys.argv[1]
    parts = read_parts(results)
    if not parts:
        sys.exit("summarize.py: %s/parts.tsv holds no part" % results)
    comparisons = compare_accuracies(parts)
    counts = {s: sum(1 for p in parts.values() if p["status"] == s) for s in ("PASS", "FAIL", "SKIP")}
    info = os.path.join(os.path.dirname(os.path.abspath(__file__)), "BUILD_INFO")
    bundle = open(info).readline().strip() if os.path.exists(info) else ""
    report = {"bundle": bundle, "passed": counts["FAIL"] == 0, "counts": counts,
              "seconds": round(sum(p["seconds"] for p in parts.values()), 1),
              "parts": parts, "accuracy_cpu_vs_cuda": comparisons}
    path = os.path.join(results, "check.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")

    print("gossamer GPU check: %d PASS, %d FAIL, %d SKIP in %.0f s%s" % (
        counts["PASS"], counts["FAIL"], counts["SKIP"], report["seconds"], " (%s)" % bundle if bundle else ""))
    for line in summary_lines(parts, comparisons):
        print("  " + line)
    grouped = {}  # (status, reason) -> parts, so that the CUDA parts skipped for one reason show once
    for name, part in parts.items():
        if part["status"] != "PASS":
            grouped.setdefault((part["status"], part["reason"]), []).append(name)
    for (status, reason), names in grouped.items():
        print("  %s %s: %s" % (status, ", ".join(names), reason))
    print("results: %s (logs: %s/<part>.log)" % (path, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
