// Helpers for tests that run the project's binaries as child processes.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

namespace gossamer::test {

struct ProcessResult {
  int exitCode = -1;
  std::string output;  // stdout and stderr, interleaved
};

// Runs `command` through the shell with a hard deadline (coreutils `timeout`), capturing
// stdout and stderr together.
inline ProcessResult runCommand(const std::string& command, int timeoutSeconds = 120) {
  const std::string full = "timeout -s KILL " + std::to_string(timeoutSeconds) + " " + command + " 2>&1";
  ProcessResult result;
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + full);
  std::array<char, 4096> chunk;
  while (std::size_t n = std::fread(chunk.data(), 1, chunk.size(), pipe)) result.output.append(chunk.data(), n);
  const int status = ::pclose(pipe);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The last non-empty line of `text`.
inline std::string lastLine(const std::string& text) {
  std::size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  std::size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

// The number after "key": in a flat JSON object; NaN when absent.
inline double jsonNumber(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const std::size_t at = json.find(needle);
  if (at == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

}  // namespace gossamer::test
