// Shared pieces of gossamer-bench: the options every subcommand takes, the Compute factory, the
// timing loop, size parsing and the result table (printed for humans, written as CSV for tools).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kernels/compute.h"
#include "net/shaped/profile.h"

namespace CLI {
class App;
}

namespace gossamer::bench {

// Options every subcommand takes.
struct CommonOptions {
  bool json = false;    // --json: headline figures as one JSON object on the last stdout line
  std::string csvPath;  // --csv FILE: every table row, full precision; empty = none
  std::string device = "cpu";  // --device cpu|cuda
};

// Registers --json, --csv and --device on `command`; `options` must outlive the parse.
void addCommonOptions(CLI::App& command, CommonOptions& options);

// Registers --loss-mode stream|datagram (net/shaped/profile.h) on `command`, into `mode`, which
// must outlive the parse; `what` says which loss it governs.
void addLossModeOption(CLI::App& command, net::shaped::LossMode& mode, std::string_view what);
// What loss does in `mode`, for a benchmark's header: "of TCP segments lost and retransmitted
// (stream)" or "of frames dropped (datagram)", to follow a percentage.
std::string describeLoss(net::shaped::LossMode mode);

// The Compute a benchmark runs on. "cpu" is the CPU backend with one OpenBLAS thread. "cuda" is
// the CUDA backend when a usable GPU exists; otherwise the same CPU backend, with the reason in
// *fallbackReason (left empty when there was no fallback).
std::unique_ptr<kernels::Compute> makeBenchCompute(std::string_view device,
                                                   std::string* fallbackReason);

// Timing of one operation, in seconds per call.
struct Stats {
  double p50 = 0;
  double p99 = 0;
  double mean = 0;
  std::size_t iterations = 0;  // timed calls, warm-up excluded
};

// Times each operation in `ops`, round-robin so that machine noise hits all of them alike. Each
// is called once to warm up, then sampled: a sample is `batch` back-to-back calls followed by
// `sync` (so asynchronous backends are timed to completion), with `batch` chosen from a second
// call so that a sample lasts about a millisecond (1 for anything slower). Sampling goes on
// until every operation has been timed for `minSeconds` and sampled at least 10 times.
// Percentiles are over samples, each divided by its batch. `sync` may be empty.
std::vector<Stats> measureInterleaved(std::span<const std::function<void()>> ops, double minSeconds,
                                      const std::function<void()>& sync);

// measureInterleaved for a single operation.
Stats measure(const std::function<void()>& op, double minSeconds,
              const std::function<void()>& sync = {});

// Parses a positive element count with an optional binary suffix: "4096", "1K" (1024), "16M",
// "1G". Returns nullopt on anything else.
std::optional<std::size_t> parseCount(std::string_view text);

// The inverse of parseCount for display: 67108864 -> "64M", 1000 -> "1000".
std::string formatCount(std::size_t count);

// An element count: shown as formatCount() in the table, as the plain number in CSV.
struct Count {
  std::size_t value = 0;
};

// Rows of results under named columns. format() aligns them for stdout; writeCsv() keeps every
// number at full precision.
class Table {
 public:
  using Cell = std::variant<std::string, double, std::int64_t, Count>;
  struct Column {
    std::string name;
    int precision = 2;  // digits after the point when a double is shown in the table
  };

  explicit Table(std::vector<Column> columns);

  // Throws gossamer::Error when `cells` does not have one cell per column.
  void addRow(std::vector<Cell> cells);
  bool empty() const { return rows_.empty(); }

  // Header line, rule and rows; text left-aligned, numbers right-aligned; ends with a newline.
  std::string format() const;
  // Header row plus one line per row. Throws gossamer::Error when `path` cannot be written.
  void writeCsv(const std::string& path) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<Cell>> rows_;
};

}  // namespace gossamer::bench
