#include "bench/bench_util.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <type_traits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/builtin.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A sample this long makes steady_clock's resolution and a GPU's synchronize() latency negligible,
// and is still shorter than most single calls measured on a CPU, which then get one call a sample.
constexpr double kSampleSeconds = 1e-3;
constexpr std::size_t kMinSamples = 10;
constexpr std::size_t kMaxBatch = std::size_t{1} << 20;

// Seconds taken by `calls` back-to-back calls of `op` plus the final `sync`.
double timeCalls(const std::function<void()>& op, std::size_t calls,
                 const std::function<void()>& sync) {
  const auto start = Clock::now();
  for (std::size_t i = 0; i < calls; ++i) op();
  if (sync) sync();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Nearest-rank percentile of an ascending, non-empty vector.
double percentile(const std::vector<double>& sorted, double fraction) {
  const auto rank =
      static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

bool isNumeric(const Table::Cell& cell) { return !std::holds_alternative<std::string>(cell); }

// A cell as the table shows it: doubles with `precision` digits, counts as "64M".
std::string displayText(const Table::Cell& cell, int precision) {
  return std::visit(
      [&](const auto& value) -> std::string {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return value;
        } else if constexpr (std::is_same_v<T, double>) {
          return fmt::format("{:.{}f}", value, precision);
        } else if constexpr (std::is_same_v<T, Count>) {
          return formatCount(value.value);
        } else {
          return fmt::format("{}", value);
        }
      },
      cell);
}

std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

// A cell as CSV holds it: numbers at full (shortest round-trip) precision, text quoted if needed.
std::string csvText(const Table::Cell& cell) {
  return std::visit(
      [](const auto& value) -> std::string {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return csvField(value);
        } else if constexpr (std::is_same_v<T, Count>) {
          return fmt::format("{}", value.value);
        } else {
          return fmt::format("{}", value);
        }
      },
      cell);
}

}  // namespace

void addCommonOptions(CLI::App& command, CommonOptions& options) {
  command.add_flag("--json", options.json,
                   "Print the headline figures as one JSON object on the last line of stdout");
  command.add_option("--csv", options.csvPath, "Write every row of the results table to FILE")
      ->option_text("FILE");
  command
      .add_option("--device", options.device,
                  "Compute backend; cuda falls back to cpu (with a note) without a usable GPU")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

void addLossModeOption(CLI::App& command, net::shaped::LossMode& mode, std::string_view what) {
  command
      .add_option_function<std::string>(
          "--loss-mode",
          [&mode](const std::string& text) { mode = *net::shaped::lossModeNamed(text); },
          fmt::format("how {} acts: stream (as over TCP: lost segments are retransmitted, "
                      "frames arrive late) or datagram (whole frames dropped)",
                      what))
      ->check(CLI::IsMember({"stream", "datagram"}))
      ->option_text(fmt::format("stream|datagram (default: {})", net::shaped::name(mode)));
}

std::string describeLoss(net::shaped::LossMode mode) {
  return mode == net::shaped::LossMode::stream ? "of TCP segments lost and retransmitted (stream)"
                                               : "of frames dropped (datagram)";
}

std::unique_ptr<kernels::Compute> makeBenchCompute(std::string_view device,
                                                   std::string* fallbackReason) {
  GOSSAMER_ENFORCE(device == "cpu" || device == "cuda", "unknown device '{}' (cpu or cuda)",
                   device);
  fallbackReason->clear();
  if (device == "cuda") {
    std::unique_ptr<kernels::Compute> compute =
        engine::makeCompute(engine::DeviceChoice::kAuto, fallbackReason);
    if (compute->device() == kernels::Device::kCuda) return compute;
    if (fallbackReason->empty()) *fallbackReason = "the CUDA backend is not available";
  }
  // Built here rather than taken from the fallback so that a CPU run always uses exactly one
  // OpenBLAS thread, whatever the engine's default is.
  return kernels::cpu::makeCompute({.blasThreads = 1});
}

std::vector<Stats> measureInterleaved(std::span<const std::function<void()>> ops, double minSeconds,
                                      const std::function<void()>& sync) {
  GOSSAMER_ENFORCE(!ops.empty(), "nothing to measure");
  GOSSAMER_ENFORCE(minSeconds >= 0, "negative minimum time {}", minSeconds);
  std::vector<std::size_t> batch(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    timeCalls(ops[i], 1, sync);  // warm-up: first touch of pages, caches, lazy initialisation
    const double once = std::max(timeCalls(ops[i], 1, sync), 1e-9);
    batch[i] = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(kSampleSeconds / once)),
                                       1, kMaxBatch);
  }

  std::vector<std::vector<double>> samples(ops.size());
  std::vector<double> elapsed(ops.size(), 0.0);
  for (bool done = false; !done;) {
    done = true;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const double seconds = timeCalls(ops[i], batch[i], sync);
      samples[i].push_back(seconds / static_cast<double>(batch[i]));
      elapsed[i] += seconds;
      done = done && samples[i].size() >= kMinSamples && elapsed[i] >= minSeconds;
    }
  }

  std::vector<Stats> stats(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::sort(samples[i].begin(), samples[i].end());
    stats[i].p50 = percentile(samples[i], 0.50);
    stats[i].p99 = percentile(samples[i], 0.99);
    stats[i].iterations = samples[i].size() * batch[i];
    stats[i].mean = elapsed[i] / static_cast<double>(stats[i].iterations);
  }
  return stats;
}

Stats measure(const std::function<void()>& op, double minSeconds,
              const std::function<void()>& sync) {
  return measureInterleaved(std::span(&op, 1), minSeconds, sync).front();
}

std::optional<std::size_t> parseCount(std::string_view text) {
  std::size_t multiplier = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        multiplier = std::size_t{1} << 10;
        break;
      case 'm':
      case 'M':
        multiplier = std::size_t{1} << 20;
        break;
      case 'g':
      case 'G':
        multiplier = std::size_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) text.remove_suffix(1);
  }
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value == 0 ||
      value > std::numeric_limits<std::size_t>::max() / multiplier) {
    return std::nullopt;
  }
  return value * multiplier;
}

std::string formatCount(std::size_t count) {
  constexpr std::pair<std::size_t, char> kUnits[] = {
      {std::size_t{1} << 30, 'G'}, {std::size_t{1} << 20, 'M'}, {std::size_t{1} << 10, 'K'}};
  for (const auto& [unit, suffix] : kUnits) {
    if (count > 0 && count % unit == 0) return fmt::format("{}{}", count / unit, suffix);
  }
  return fmt::format("{}", count);
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::addRow(std::vector<Cell> cells) {
  GOSSAMER_ENFORCE_EQ(cells.size(), columns_.size(), "table row needs one cell per column");
  rows_.push_back(std::move(cells));
}

std::string Table::format() const {
  std::vector<std::vector<std::string>> text(rows_.size());
  std::vector<std::size_t> widths;
  for (const Column& column : columns_) widths.push_back(column.name.size());
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      text[r].push_back(displayText(rows_[r][c], columns_[c].precision));
      widths[c] = std::max(widths[c], text[r][c].size());
    }
  }
  // A column is right-aligned when its first row holds a number.
  auto line = [&](auto cellText) {
    std::string out;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const bool right = !rows_.empty() && isNumeric(rows_.front()[c]);
      out += right ? fmt::format("{:>{}}", cellText(c), widths[c])
                   : fmt::format("{:<{}}", cellText(c), widths[c]);
      out += c + 1 < columns_.size() ? "  " : "\n";
    }
    return out;
  };
  std::string out = line([&](std::size_t c) { return columns_[c].name; });
  out += line([&](std::size_t c) { return std::string(widths[c], '-'); });
  for (const auto& row : text) out += line([&](std::size_t c) { return row[c]; });
  return out;
}

void Table::writeCsv(const std::string& path) const {
  std::ofstream file(path);
  GOSSAMER_ENFORCE(file.good(), "cannot open '{}' for writing", path);
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    file << csvField(columns_[c].name) << (c + 1 < columns_.size() ? "," : "\n");
  }
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      file << csvText(row[c]) << (c + 1 < row.size() ? "," : "\n");
    }
  }
  file.flush();
  GOSSAMER_ENFORCE(file.good(), "failed writing '{}'", path);
}

}  // namespace gossamer::bench
