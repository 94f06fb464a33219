// JSON-lines metrics: one JSON object per line, appended and flushed as it happens, so a
// crashed run keeps every line written before the crash.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "engine/base/json.h"

namespace gossamer::engine::train {

class MetricsLog {
 public:
  // An empty path makes a log that discards everything. Throws gossamer::Error naming the
  // path when the file cannot be opened for appending.
  explicit MetricsLog(const std::string& path);
  void write(const JsonObject& record);
  bool enabled() const { return file_ != nullptr; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
};

}  // namespace gossamer::engine::train
