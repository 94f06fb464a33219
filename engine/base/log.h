// Named spdlog loggers, one per subsystem ("kernels", "engine", "data", "net", ...), all writing
// to one shared stderr sink so that the progress view on stdout stays clean.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace gossamer::log {

// Returns the logger of `subsystem`, creating it on first use. Thread-safe.
std::shared_ptr<spdlog::logger> get(const std::string& subsystem);

// Sets the level of every existing and future gossamer logger ("trace".."off"). Throws
// gossamer::Error on an unknown level name.
void setLevel(const std::string& level);

}  // namespace gossamer::log
