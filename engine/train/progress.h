// Progress view of a training run. On a terminal: one line redrawn in place (bar, percentage,
// step, loss, accuracy, throughput, ETA) at most 10 times a second. Not on a terminal (a log
// file, CI): plain lines, one per `plainEvery` fraction of the run and one per message.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gossamer::engine::train {

class Progress {
 public:
  // `total` steps; `out` is where to draw (stdout by default); `enabled` false prints nothing.
  Progress(std::int64_t total, bool enabled, std::FILE* out = stdout);

  // Called every step; cheap when nothing needs drawing. `status` is free text such as
  // "loss 0.412 acc 85.3%".
  void update(std::int64_t step, const std::string& status);
  // Prints a line of its own (an evaluation result) without breaking the bar.
  void message(const std::string& text);
  // Ends the bar with a newline.
  void finish();

  static bool isTerminal(std::FILE* out);

 private:
  void draw(std::int64_t step, const std::string& status);

  std::int64_t total_;
  bool enabled_;
  std::FILE* out_;
  bool tty_;
  bool barVisible_ = false;
  std::int64_t lastPlainStep_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point lastDraw_{};
};

}  // namespace gossamer::engine::train
