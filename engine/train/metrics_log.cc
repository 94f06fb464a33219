#include "engine/train/metrics_log.h"

#include <cerrno>
#include <cstring>

#include "engine/base/enforce.h"

namespace gossamer::engine::train {

MetricsLog::MetricsLog(const std::string& path) {
  if (path.empty()) return;
  file_.reset(std::fopen(path.c_str(), "a"));
  GOSSAMER_ENFORCE(file_ != nullptr, "cannot open metrics file {}: {}", path, std::strerror(errno));
}

void MetricsLog::write(const JsonObject& record) {
  if (!file_) return;
  const std::string line = record.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_.get());
  std::fflush(file_.get());
}

}  // namespace gossamer::engine::train
