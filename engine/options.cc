#include "engine/options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace gossamer::engine {

OptionValues parseOptionList(const std::string& text) {
  OptionValues values;
  for (const std::string& item : detail::splitList(text)) {
    const std::size_t eq = item.find('=');
    GOSSAMER_ENFORCE(eq != std::string::npos && eq > 0, "option '{}' in '{}' must be NAME=VALUE",
                     item, text);
    values[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return values;
}

std::string formatOptionList(const OptionValues& values) {
  std::string out;
  for (const auto& [name, value] : values) out += (out.empty() ? "" : ",") + name + "=" + value;
  return out;
}

std::string closestName(const std::string& name, const std::vector<std::string>& candidates) {
  // Levenshtein distance, one row at a time.
  auto distance = [&](const std::string& other) {
    std::vector<std::size_t> row(other.size() + 1);
    for (std::size_t j = 0; j <= other.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= name.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= other.size(); ++j) {
        const std::size_t above = row[j];
        row[j] = std::min(
            {row[j] + 1, row[j - 1] + 1, diagonal + (name[i - 1] == other[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    return row[other.size()];
  };
  std::string best;
  std::size_t bestDistance = 0;
  for (const std::string& candidate : candidates) {
    const std::size_t d = distance(candidate);
    if (best.empty() || d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

namespace detail {

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    std::string item = text.substr(begin, end - begin);
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? "" : item.substr(first, last - first + 1);
    if (!item.empty()) out.push_back(item);
    begin = end + 1;
  }
  return out;
}

void parseOne(const std::string& name, const std::string& text, bool& out) {
  if (text == "true" || text == "1" || text == "on" || text == "yes") {
    out = true;
  } else if (text == "false" || text == "0" || text == "off" || text == "no") {
    out = false;
  } else {
    GOSSAMER_THROW("option '{}': '{}' is not a boolean (use true or false)", name, text);
  }
}

void parseOne(const std::string& name, const std::string& text, double& out) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  GOSSAMER_ENFORCE(
      !text.empty() && end == text.c_str() + text.size() && errno == 0 && std::isfinite(value),
      "option '{}': '{}' is not a finite number", name, text);
  out = value;
}

void parseOne(const std::string& name, const std::string& text, float& out) {
  double value = 0;
  parseOne(name, text, value);
  out = static_cast<float>(value);
}

void parseOne(const std::string& name, const std::string& text, std::int64_t& out) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  GOSSAMER_ENFORCE(!text.empty() && end == text.c_str() + text.size() && errno == 0,
                   "option '{}': '{}' is not an integer", name, text);
  out = value;
}

void parseOne(const std::string& name, const std::string& text, std::uint64_t& out) {
  std::int64_t value = 0;
  parseOne(name, text, value);
  GOSSAMER_ENFORCE(value >= 0, "option '{}': {} must not be negative", name, text);
  out = static_cast<std::uint64_t>(value);
}

void parseOne(const std::string&, const std::string& text, std::string& out) { out = text; }

}  // namespace detail
}  // namespace gossamer::engine
