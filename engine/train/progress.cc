#include "engine/train/progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace gossamer::engine::train {
namespace {
constexpr int kBarWidth = 28;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr std::int64_t kPlainLines = 10;  // plain mode prints about this many progress lines
}  // namespace

bool Progress::isTerminal(std::FILE* out) { return ::isatty(::fileno(out)) == 1; }

Progress::Progress(std::int64_t total, bool enabled, std::FILE* out)
    : total_(std::max<std::int64_t>(total, 1)), enabled_(enabled), out_(out), tty_(isTerminal(out)) {}

void Progress::update(std::int64_t step, const std::string& status) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (step < total_ && now - lastDraw_ < kRedrawInterval) return;
    lastDraw_ = now;
    draw(step, status);
    return;
  }
  const std::int64_t every = std::max<std::int64_t>(total_ / kPlainLines, 1);
  if (step / every == lastPlainStep_ / every && step != total_) return;
  lastPlainStep_ = step;
  draw(step, status);
}

void Progress::draw(std::int64_t step, const std::string& status) {
  const double fraction = std::clamp(static_cast<double>(step) / static_cast<double>(total_), 0.0, 1.0);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
  const std::string text = fmt::format("{:5.1f}% step {}/{} {} | {:.0f}s elapsed, ETA {:.0f}s",
                                       100 * fraction, step, total_, status, elapsed, eta);
  if (tty_) {
    const int filled = static_cast<int>(fraction * kBarWidth);
    fmt::print(out_, "\r\033[2K[{}{}] {}", std::string(filled, '#'),
               std::string(kBarWidth - filled, '.'), text);
    barVisible_ = true;
  } else {
    fmt::print(out_, "{}\n", text);
  }
  std::fflush(out_);
}

void Progress::message(const std::string& text) {
  if (!enabled_) return;
  if (tty_ && barVisible_) fmt::print(out_, "\r\033[2K");
  fmt::print(out_, "{}\n", text);
  barVisible_ = false;
  lastDraw_ = {};  // redraw the bar at the next update
  std::fflush(out_);
}

void Progress::finish() {
  if (enabled_ && tty_ && barVisible_) fmt::print(out_, "\n");
  barVisible_ = false;
  if (enabled_) std::fflush(out_);
}

}  // namespace gossamer::engine::train
