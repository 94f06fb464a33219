// Error handling for bugs and misuse: GOSSAMER_ENFORCE* throw
// gossamer::Error carrying file:line, the failed condition and the values involved.
// I/O failures inside net/ are std::error_code values instead, never these macros.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ostream.h>

namespace gossamer {

// The one exception type of the engine. what() is a complete sentence for the user; where() is
// for developers: the failed check and the source location ("(check failed: x > 0)
// [engine/peer_main.cc:419]"), empty when thrown without one. Top-level catches print what() and
// log where() at debug level.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string where = {})
      : std::runtime_error(what), where_(std::move(where)) {}
  const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

namespace detail {
[[noreturn]] void throwEnforce(const char* file, int line, const char* condition,
                               const std::string& message);

template <typename... Args>
std::string formatMessage(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}
inline std::string formatMessage() { return {}; }
}  // namespace detail

}  // namespace gossamer

// GOSSAMER_ENFORCE(cond, "fmt {}", args...): throws gossamer::Error when cond is false.
#define GOSSAMER_ENFORCE(cond, ...)                                                         \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::gossamer::detail::throwEnforce(__FILE__, __LINE__, #cond,                           \
                                       ::gossamer::detail::formatMessage(__VA_ARGS__));     \
    }                                                                                       \
  } while (0)

// GOSSAMER_THROW("fmt {}", args...): unconditional error with the same formatting.
#define GOSSAMER_THROW(...)                                                                 \
  ::gossamer::detail::throwEnforce(__FILE__, __LINE__, nullptr,                             \
                                   ::gossamer::detail::formatMessage(__VA_ARGS__))

#define GOSSAMER_ENFORCE_OP_(a, b, op, ...)                                                 \
  do {                                                                                      \
    const auto& gossamer_a_ = (a);                                                         \
    const auto& gossamer_b_ = (b);                                                         \
    if (!(gossamer_a_ op gossamer_b_)) [[unlikely]] {                                       \
      ::gossamer::detail::throwEnforce(                                                     \
          __FILE__, __LINE__, #a " " #op " " #b,                                            \
          fmt::format("({} vs {}) {}", gossamer_a_, gossamer_b_,                            \
                      ::gossamer::detail::formatMessage(__VA_ARGS__)));                     \
    }                                                                                       \
  } while (0)

// Comparison forms print both values: GOSSAMER_ENFORCE_EQ(a.size(), b.size(), "shapes").
#define GOSSAMER_ENFORCE_EQ(a, b, ...) GOSSAMER_ENFORCE_OP_(a, b, ==, __VA_ARGS__)
#define GOSSAMER_ENFORCE_NE(a, b, ...) GOSSAMER_ENFORCE_OP_(a, b, !=, __VA_ARGS__)
#define GOSSAMER_ENFORCE_LT(a, b, ...) GOSSAMER_ENFORCE_OP_(a, b, <, __VA_ARGS__)
#define GOSSAMER_ENFORCE_LE(a, b, ...) GOSSAMER_ENFORCE_OP_(a, b, <=, __VA_ARGS__)
#define GOSSAMER_ENFORCE_GT(a, b, ...) GOSSAMER_ENFORCE_OP_(a, b, >, __VA_ARGS__)
#define GOSSAMER_ENFORCE_GE(a, b, ...) GOSSAMER_ENFORCE_OP_(a, b, >=, __VA_ARGS__)
