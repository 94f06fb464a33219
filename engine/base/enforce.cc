#include "engine/base/enforce.h"

namespace gossamer::detail {

void throwEnforce(const char* file, int line, const char* condition, const std::string& message) {
  std::string text = message;
  if (condition != nullptr) {
    text = fmt::format("{}{}(check failed: {})", message, message.empty() ? "" : " ", condition);
  }
  throw Error(fmt::format("{} [{}:{}]", text, file, line));
}

}  // namespace gossamer::detail
