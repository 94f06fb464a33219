// How peer_settings*.cc declare a setting: a typed builder that fills one Setting's text-level
// functions from a field, its rules and its Python binding. Internal to those files.
//
//   declare<double>(out, "join-timeout", "seconds for ...")
//       .field(&PeerOptions::joinTimeout)
//       .seconds(true)
//       .python("join_timeout", [](PeerConfig& c, double v) { c.training.joinTimeout = ...; });
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/options.h"
#include "engine/peer_settings.h"

namespace gossamer::engine::cli::declaring {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// What a value must satisfy beyond its type.
template <typename T>
struct Rules {
  std::optional<double> min;
  bool minExclusive = false;
  std::optional<double> max;
  std::vector<std::string> allowed;
  int seconds = -1;                     // -1: not seconds; 0: more than 0; 1: 0 or more
  std::function<void(const T&)> extra;  // throws gossamer::Error with the reason
};

template <typename T>
std::string typeLabel() {
  if constexpr (IsVector<T>::value)
    return "[" + typeLabel<typename T::value_type>() + ",...]";
  else if constexpr (std::is_same_v<T, bool>)
    return "BOOL";
  else if constexpr (std::is_floating_point_v<T>)
    return "FLOAT";
  else if constexpr (std::is_integral_v<T>)
    return "INT";
  else
    return "TEXT";
}

template <typename T>
std::string typeWords() {
  if constexpr (IsVector<T>::value)
    return "a comma-separated list of " + typeWords<typename T::value_type>();
  else if constexpr (std::is_same_v<T, bool>)
    return "true or false";
  else if constexpr (std::is_floating_point_v<T>)
    return "a finite number";
  else if constexpr (std::is_unsigned_v<T>)
    return "a whole number (0 or more)";
  else
    return "a whole number";
}

// "" when `text` parses as a T that keeps `rules`, else why not.
template <typename T>
std::string checkText(const Rules<T>& rules, const std::string& text, T* out = nullptr) {
  if (rules.seconds >= 0) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    const bool number = !text.empty() && end == text.c_str() + text.size() && std::isfinite(value);
    if (!number || (rules.seconds == 1 ? value < 0 : value <= 0))
      return fmt::format("'{}' is not a number of seconds ({})", text,
                         rules.seconds == 1 ? "0 or more" : "more than 0");
  }
  T value{};
  try {
    detail::parseOne("", text, value);
  } catch (const Error&) {
    return fmt::format("'{}' is not {}", text, typeWords<T>());
  }
  if (!rules.allowed.empty() &&
      std::find(rules.allowed.begin(), rules.allowed.end(), text) == rules.allowed.end())
    return fmt::format("'{}' is not one of: {}", text, fmt::join(rules.allowed, ", "));
  auto bounds = [&](double x) -> std::string {
    if (rules.min && (rules.minExclusive ? x <= *rules.min : x < *rules.min))
      return fmt::format("'{}' must be {} {}", text, rules.minExclusive ? "more than" : "at least",
                         *rules.min);
    if (rules.max && x > *rules.max)
      return fmt::format("'{}' must be at most {}", text, *rules.max);
    return {};
  };
  if constexpr (IsVector<T>::value) {
    if constexpr (std::is_arithmetic_v<typename T::value_type>)
      for (const auto& item : value)
        if (std::string why = bounds(static_cast<double>(item)); !why.empty()) return why;
  } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (std::string why = bounds(static_cast<double>(value)); !why.empty()) return why;
  }
  if (rules.extra) {
    try {
      rules.extra(value);
    } catch (const Error& e) {
      return e.what();
    }
  }
  if (out != nullptr) *out = std::move(value);
  return {};
}

// Builds the Setting at `out[index]`; every call refines it.
template <typename T>
class Declare {
 public:
  Declare(std::vector<Setting>& out, std::string name, std::string help, std::string group)
      : out_(out), index_(out.size()), rules_(std::make_shared<Rules<T>>()) {
    Setting s;
    s.name = std::move(name);
    s.help = std::move(help);
    s.group = std::move(group);
    s.type = typeLabel<T>();
    s.list = IsVector<T>::value;
    s.check = [rules = rules_](const std::string& text) { return checkText<T>(*rules, text); };
    out_.push_back(std::move(s));
  }

  // Bound to the command line: stored in `o.*member`, its initial value the default.
  Declare& field(T PeerOptions::*member) {
    return field([member](PeerOptions& o) -> T& { return o.*member; });
  }
  // ... or in the field `access` returns (a nested one).
  template <typename Access>
  Declare& field(Access access) requires std::is_invocable_r_v<T&, Access, PeerOptions&> {
    PeerOptions defaults;
    setting().frontEnds |= kPeerFlags;
    setting().defaultValue = detail::formatOne(access(defaults));
    setting().set = [access, rules = rules_](PeerOptions& o, const std::string& text) {
      T value{};
      const std::string why = checkText<T>(*rules, text, &value);
      GOSSAMER_ENFORCE(why.empty(), "{}", why);
      access(o) = std::move(value);
    };
    setting().get = [access](const PeerOptions& o) {
      return detail::formatOne(access(const_cast<PeerOptions&>(o)));
    };
    return *this;
  }
  // ... or stored by `store` (given checked text) and read back by `load`.
  Declare& stored(std::function<void(PeerOptions&, const std::string&)> store,
                  std::function<std::string(const PeerOptions&)> load) {
    setting().frontEnds |= kPeerFlags;
    setting().set = std::move(store);
    setting().get = std::move(load);
    return *this;
  }
  // Taken by the benchmarks' front ends `ends` (kSimulate, kRun), there named `name` and helped
  // by `help` when they differ from the setting's.
  Declare& bench(unsigned ends, std::string name = "", std::string help = "") {
    setting().frontEnds |= ends;
    setting().benchName = std::move(name);
    setting().benchHelp = std::move(help);
    return *this;
  }
  // A [matrix] list of this setting's values, named `list` (and `aliases`).
  Declare& matrix(std::string list, std::vector<std::string> aliases = {}) {
    setting().frontEnds |= kMatrix;
    setting().matrixName = std::move(list);
    setting().matrixAliases = std::move(aliases);
    return *this;
  }

  Declare& alias(std::string name) {
    setting().aliases.push_back(std::move(name));
    return *this;
  }
  Declare& flag() {
    setting().flag = true;
    setting().type.clear();
    return *this;
  }
  Declare& hideDefault() {
    setting().defaultValue.clear();
    return *this;
  }
  Declare& oneOf(std::vector<std::string> values) {
    rules_->allowed = values;
    setting().allowed = std::move(values);
    setting().type = "{" + fmt::format("{}", fmt::join(setting().allowed, ",")) + "}";
    return *this;
  }
  Declare& atLeast(double bound) {
    rules_->min = bound;
    return *this;
  }
  Declare& above(double bound) {
    rules_->min = bound;
    rules_->minExclusive = true;
    return *this;
  }
  Declare& atMost(double bound) {
    rules_->max = bound;
    return *this;
  }
  // A number of seconds: finite, and above 0 or (zeroAllowed) also 0.
  Declare& seconds(bool zeroAllowed) {
    rules_->seconds = zeroAllowed ? 1 : 0;
    setting().type = "SECONDS";
    return *this;
  }
  // Any further rule: `rule` throws gossamer::Error with the reason.
  Declare& valid(std::function<void(const T&)> rule) {
    rules_->extra = std::move(rule);
    return *this;
  }

  // The Python keyword `name`; `apply` is given a checked value.
  template <typename Apply>
  Declare& python(std::string name, Apply apply, std::string help = "") {
    setting().frontEnds |= kPython;
    setting().python = std::move(name);
    setting().pythonHelp = std::move(help);
    setting().apply = [apply, rules = rules_](PeerConfig& c, const std::string& text) {
      T value{};
      const std::string why = checkText<T>(*rules, text, &value);
      GOSSAMER_ENFORCE(why.empty(), "{}", why);
      apply(c, value);
    };
    return *this;
  }

 private:
  Setting& setting() { return out_[index_]; }

  std::vector<Setting>& out_;
  std::size_t index_;
  std::shared_ptr<Rules<T>> rules_;
};

// The parts of peerSettings(): model, data and training (peer_settings.cc); the cluster
// (peer_settings_cluster.cc); the benchmarks' own (peer_settings_bench.cc).
void addTrainingSettings(std::vector<Setting>& out, const Registry& registry);
void addClusterSettings(std::vector<Setting>& out, const Registry& registry);
void addBenchSettings(std::vector<Setting>& out);

// A duration of `seconds` (checked: finite, not negative), to the millisecond.
inline std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000)));
}

}  // namespace gossamer::engine::cli::declaring
