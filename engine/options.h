// Typed option structs settable by name: how an algorithm's hyper-parameters reach it from the
// command line (`--gosgd.p 0.05`), a config file (`[gosgd]` / `p = 0.05`) or a benchmark's
// experiment list, with the same names, defaults and help everywhere.
//
// An options struct lists its fields once:
//   struct GosgdOptions {
//     double p = 0.1;
//     template <typename Bind> void bind(Bind& b) { b("p", p, "probability of gossiping after a
//     step"); } void validate() const;  // optional: throws gossamer::Error on inconsistent values
//   };
// describeOptions<O>() lists (name, default, help, type); parseOptions<O>(values) builds an O
// from strings, throwing gossamer::Error that names the option for an unknown name or a bad value.
// Field types: bool, integers, float, double, std::string, vectors of those (comma-separated) and
// Auto<T> of a number ("auto", the algorithm chooses at run time, or a fixed value).
// A struct whose names and help are declared elsewhere (a run-level setting, peer_settings.h) may
// leave the help out: b("lr", lr).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::engine {

struct OptionInfo {
  std::string name;
  std::string defaultValue;
  std::string help;
  std::string type;  // "float", "int", "bool", "text", "list of int", ...
};

// A knob the algorithm may choose itself: "auto" (no value: chosen at run time, from what the
// peers measure) or a fixed value, which always wins.
template <typename T>
struct Auto {
  using Value = T;
  std::optional<T> fixed;  // none: auto
  Auto() = default;
  Auto(T value) : fixed(value) {}  // NOLINT: a fixed default reads as the number
  static Auto automatic() { return Auto{}; }
  bool isAuto() const { return !fixed.has_value(); }
  // The fixed value, or `chosen` when auto.
  T valueOr(T chosen) const { return fixed.value_or(chosen); }
  friend bool operator==(const Auto&, const Auto&) = default;
};

// Option values by name, as text.
using OptionValues = std::map<std::string, std::string>;

// "a=1,b=x" -> {a: 1, b: x}; a value may not contain ','. Throws gossamer::Error on an entry
// without '='.
OptionValues parseOptionList(const std::string& text);
// The inverse, in name order: "a=1,b=x".
std::string formatOptionList(const OptionValues& values);

// The candidate nearest to `name` by edit distance (the first of equals; empty when there are
// none): what an unknown setting's error suggests ("did you mean ...?").
std::string closestName(const std::string& name, const std::vector<std::string>& candidates);

namespace detail {

void parseOne(const std::string& name, const std::string& text, bool& out);
void parseOne(const std::string& name, const std::string& text, double& out);
void parseOne(const std::string& name, const std::string& text, float& out);
void parseOne(const std::string& name, const std::string& text, std::int64_t& out);
void parseOne(const std::string& name, const std::string& text, std::uint64_t& out);
void parseOne(const std::string& name, const std::string& text, std::string& out);

template <typename T>
void parseOne(const std::string& name, const std::string& text,
              T& out) requires(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                               !std::is_same_v<T, std::int64_t> &&
                               !std::is_same_v<T, std::uint64_t>) {
  if constexpr (std::is_signed_v<T>) {
    std::int64_t wide = 0;
    parseOne(name, text, wide);
    GOSSAMER_ENFORCE(wide >= std::numeric_limits<T>::min() && wide <= std::numeric_limits<T>::max(),
                     "option '{}': {} is out of range", name, text);
    out = static_cast<T>(wide);
  } else {
    std::uint64_t wide = 0;
    parseOne(name, text, wide);
    GOSSAMER_ENFORCE(wide <= std::numeric_limits<T>::max(), "option '{}': {} is out of range", name,
                     text);
    out = static_cast<T>(wide);
  }
}

std::vector<std::string> splitList(const std::string& text);

template <typename T>
void parseOne(const std::string& name, const std::string& text, Auto<T>& out) {
  if (text == "auto") {
    out = Auto<T>::automatic();
    return;
  }
  T value{};
  parseOne(name, text, value);
  out = Auto<T>(value);
}

template <typename T>
void parseOne(const std::string& name, const std::string& text, std::vector<T>& out) {
  std::vector<T> values;
  for (const std::string& item : splitList(text)) {
    T value{};
    parseOne(name, item, value);
    values.push_back(value);
  }
  out = std::move(values);
}

template <typename T>
struct IsAuto : std::false_type {};
template <typename T>
struct IsAuto<Auto<T>> : std::true_type {};

template <typename T>
std::string formatOne(const T& value) {
  if constexpr (IsAuto<T>::value) {
    return value.fixed ? formatOne(*value.fixed) : "auto";
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return value;
  } else if constexpr (requires { value.begin(); }) {
    std::string out;
    for (const auto& item : value) out += (out.empty() ? "" : ",") + formatOne(item);
    return out;
  } else {
    return fmt::format("{}", value);
  }
}

template <typename T>
std::string typeName() {
  if constexpr (IsAuto<T>::value)
    return "auto or " + typeName<typename T::Value>();
  else if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_floating_point_v<T>)
    return "float";
  else if constexpr (std::is_integral_v<T>)
    return "int";
  else if constexpr (std::is_same_v<T, std::string>)
    return "text";
  else
    return "list of " + typeName<typename T::value_type>();
}

}  // namespace detail

template <typename O>
std::vector<OptionInfo> describeOptions() {
  O defaults{};
  std::vector<OptionInfo> out;
  auto bind = [&](const char* name, auto& field, const char* help = "") {
    using T = std::remove_cvref_t<decltype(field)>;
    out.push_back(OptionInfo{name, detail::formatOne(field), help, detail::typeName<T>()});
  };
  defaults.bind(bind);
  return out;
}

template <typename O>
O parseOptions(const OptionValues& values) {
  O options{};
  std::set<std::string> known;
  auto bind = [&](const char* name, auto& field, const char* = "") {
    known.insert(name);
    if (const auto it = values.find(name); it != values.end())
      detail::parseOne(name, it->second, field);
  };
  options.bind(bind);
  for (const auto& [name, value] : values) {
    if (known.count(name) == 0) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      if (known.empty()) GOSSAMER_THROW("unknown option '{}' (known: none)", name);
      GOSSAMER_THROW("unknown option '{}' (known: {}); did you mean '{}'?", name, names,
                     closestName(name, std::vector<std::string>(known.begin(), known.end())));
    }
  }
  if constexpr (requires { options.validate(); }) options.validate();
  return options;
}

// The values of an options struct as text, by name (for reports).
template <typename O>
OptionValues optionValues(const O& options) {
  OptionValues out;
  O copy = options;
  auto bind = [&](const char* name, auto& field, const char* = "") {
    out[name] = detail::formatOne(field);
  };
  copy.bind(bind);
  return out;
}

}  // namespace gossamer::engine
