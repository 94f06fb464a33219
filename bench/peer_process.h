// One life of a gossamer-peer process for `gossamer-bench chaos --processes`: started with
// posix_spawn, its stdout and stderr in one log file, killed with a real SIGKILL, reaped by
// polling waitpid, and its progress read from its metrics file as it grows. One thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace gossamer::bench {

class PeerProcess {
 public:
  using SystemTime = std::chrono::system_clock::time_point;

  // Starts `binary` with `args` (argv[1..]); stdout and stderr go to `logPath` (truncated), and
  // the process appends its evaluations to `metricsPath` (--metrics). The environment is this
  // process's, with OPENBLAS_NUM_THREADS=1 unless set: many peers share few cores. Throws
  // gossamer::Error when the process cannot be started.
  PeerProcess(const std::filesystem::path& binary, const std::vector<std::string>& args,
              std::filesystem::path logPath, std::filesystem::path metricsPath);
  // SIGKILLs and reaps the process if it is still running.
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // kill -9, then reaps it (a SIGKILLed process is gone within moments; waits up to 5 s).
  void kill();
  // Reaps the process if it has exited (waitpid WNOHANG), taking the time; true once it has.
  bool poll();
  bool exited() const { return exitStatus_.has_value(); }
  // Its exit code, or 128 + the signal that ended it; none while it runs.
  std::optional<int> exitStatus() const { return exitStatus_; }
  // When poll() or kill() reaped it (the system clock, comparable with other processes' times).
  SystemTime exitedAt() const { return exitedAt_; }
  std::chrono::steady_clock::time_point startedAt() const { return startedAt_; }

  // The port of its "listening on 127.0.0.1:PORT" log line; 0 until it has logged it.
  int port();
  // The last step in its metrics file ("step" of its evaluations); 0 before the first.
  std::uint64_t step();

  std::string log() const;
  // Its last `lines` lines of log, for a violation's message.
  std::string logTail(std::size_t lines) const;
  // The last line of its log that is a JSON object: the --json result line. Empty: none.
  std::string resultLine() const;

 private:
  std::filesystem::path logPath_;
  std::filesystem::path metricsPath_;
  pid_t pid_ = -1;
  std::optional<int> exitStatus_;
  SystemTime exitedAt_;
  std::chrono::steady_clock::time_point startedAt_;
  int port_ = 0;
  std::uint64_t step_ = 0;
  std::uint64_t metricsRead_ = 0;  // bytes of the metrics file read so far (whole lines)
};

// The number after "key": in a flat JSON object `line`; NaN when absent or not a number (null).
double jsonNumber(const std::string& line, const std::string& key);
// The numbers of the nested flat object at "key": in `line` (gossamer-peer's "metrics"), by
// name; empty when absent. A null (NaN) value is left out.
std::map<std::string, double> jsonNumbers(const std::string& line, const std::string& key);

}  // namespace gossamer::bench
