#include "engine/base/log.h"

#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "engine/base/enforce.h"

namespace gossamer::log {
namespace {

struct Registry {
  std::mutex mutex;
  spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  spdlog::level::level_enum level = spdlog::level::info;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

std::shared_ptr<spdlog::logger> get(const std::string& subsystem) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (auto existing = spdlog::get(subsystem)) return existing;
  auto logger = std::make_shared<spdlog::logger>(subsystem, r.sink);
  logger->set_level(r.level);
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  spdlog::register_logger(logger);
  return logger;
}

void setLevel(const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  GOSSAMER_ENFORCE(parsed != spdlog::level::off || level == "off",
                   "unknown log level '{}' (use trace, debug, info, warn, error, critical, off)",
                   level);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.level = parsed;
  spdlog::apply_all([parsed](const std::shared_ptr<spdlog::logger>& l) { l->set_level(parsed); });
}

}  // namespace gossamer::log
