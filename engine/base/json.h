// A minimal writer for flat JSON objects, used for JSON-lines metrics and the `--json` result
// line of the binaries. Keys keep insertion order; doubles print with full precision; NaN and
// infinities print as null (JSON has no such numbers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gossamer {

class JsonObject {
 public:
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, std::int64_t value);
  JsonObject& add(std::string_view key, std::uint64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, std::int64_t{value}); }
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  // Inserts `json` verbatim (a nested object or array already serialised).
  JsonObject& addRaw(std::string_view key, std::string_view json);

  // The object as one line: {"a":1,"b":"x"}.
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view key);
  std::string body_;
};

// `text` as a JSON string literal, quotes included.
std::string jsonQuote(std::string_view text);

}  // namespace gossamer
