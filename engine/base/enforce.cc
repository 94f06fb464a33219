#include "engine/base/enforce.h"

namespace gossamer::detail {

void throwEnforce(const char* file, int line, const char* condition, const std::string& message) {
  const std::string check =
      condition != nullptr ? fmt::format("(check failed: {}) ", condition) : std::string();
  // A check without a message: the check is all a reader gets.
  const std::string what =
      message.empty() ? fmt::format("check failed: {}", condition != nullptr ? condition : "?")
                      : message;
  throw Error(what, fmt::format("{}[{}:{}]", check, file, line));
}

}  // namespace gossamer::detail
