// Helpers for tests that run the project's binaries as child processes.
#pragma once

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gossamer::test {

struct ProcessResult {
  int exitCode = -1;
  std::string output;  // stdout and stderr, interleaved
};

// Runs `command` through the shell with a hard deadline (coreutils `timeout`), capturing
// stdout and stderr together.
inline ProcessResult runCommand(const std::string& command, int timeoutSeconds = 120) {
  const std::string full =
      "timeout -s KILL " + std::to_string(timeoutSeconds) + " " + command + " 2>&1";
  ProcessResult result;
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + full);
  std::array<char, 4096> chunk;
  while (std::size_t n = std::fread(chunk.data(), 1, chunk.size(), pipe))
    result.output.append(chunk.data(), n);
  const int status = ::pclose(pipe);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The last non-empty line of `text`.
inline std::string lastLine(const std::string& text) {
  std::size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  std::size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1,
                     end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

// The number after "key": in a flat JSON object; NaN when absent.
inline double jsonNumber(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const std::size_t at = json.find(needle);
  if (at == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

// A child process started in the background with its stdout and stderr in a file, for tests that
// run several peers at once. Killed (SIGKILL) on destruction if still running.
class ChildProcess {
 public:
  // Runs `command` through /bin/sh; output goes to `outputPath`.
  ChildProcess(const std::string& command, std::string outputPath)
      : outputPath_(std::move(outputPath)) {
    const std::string full = "exec " + command + " > '" + outputPath_ + "' 2>&1";
    const char* argv[] = {"/bin/sh", "-c", full.c_str(), nullptr};
    if (::posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv),
                      ::environ) != 0)
      throw std::runtime_error("posix_spawn failed: " + command);
  }
  ~ChildProcess() {
    if (!exited_) {
      kill(SIGKILL);
      wait(std::chrono::seconds(10));
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void kill(int signal) { ::kill(pid_, signal); }

  // Waits up to `timeout` for the exit; returns the exit code (128 + signal), or -1 on timeout.
  int wait(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!exited_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        exitCode_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= until) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exitCode_;
  }

  std::string output() const {
    std::ifstream in(outputPath_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string outputPath_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exitCode_ = -1;
};

}  // namespace gossamer::test
