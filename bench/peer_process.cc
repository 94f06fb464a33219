#include "bench/peer_process.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/enforce.h"

extern char** environ;

namespace gossamer::bench {
namespace {

// This process's environment for a child, with OPENBLAS_NUM_THREADS=1 unless already set.
std::vector<std::string> childEnvironment() {
  std::vector<std::string> out;
  bool blasThreads = false;
  for (char** entry = ::environ; *entry != nullptr; ++entry) {
    out.emplace_back(*entry);
    if (out.back().rfind("OPENBLAS_NUM_THREADS=", 0) == 0) blasThreads = true;
  }
  if (!blasThreads) out.emplace_back("OPENBLAS_NUM_THREADS=1");
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int statusOf(int waitStatus) {
  return WIFEXITED(waitStatus) ? WEXITSTATUS(waitStatus) : 128 + WTERMSIG(waitStatus);
}

}  // namespace

PeerProcess::PeerProcess(const std::filesystem::path& binary, const std::vector<std::string>& args,
                         std::filesystem::path logPath, std::filesystem::path metricsPath)
    : logPath_(std::move(logPath)), metricsPath_(std::move(metricsPath)) {
  std::vector<std::string> argv = {binary.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env = childEnvironment();
  std::vector<char*> argvPointers = pointers(argv);
  std::vector<char*> envPointers = pointers(env);

  posix_spawn_file_actions_t files;
  ::posix_spawn_file_actions_init(&files);
  ::posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&files, 1, logPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
  ::posix_spawn_file_actions_adddup2(&files, 1, 2);
  const int error = ::posix_spawn(&pid_, argvPointers[0], &files, nullptr, argvPointers.data(),
                                  envPointers.data());
  ::posix_spawn_file_actions_destroy(&files);
  if (error != 0)
    throw Error(fmt::format("cannot start {}: {}", binary.string(), std::strerror(error)));
  startedAt_ = std::chrono::steady_clock::now();
}

PeerProcess::~PeerProcess() {
  if (!exited()) kill();
}

void PeerProcess::kill() {
  if (exited()) return;
  ::kill(pid_, SIGKILL);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!poll() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

bool PeerProcess::poll() {
  if (exited()) return true;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exitStatus_ = statusOf(status);
    exitedAt_ = std::chrono::system_clock::now();
  } else if (r < 0 && errno == ECHILD) {
    exitStatus_ = -1;  // reaped elsewhere: never here, as this object owns the child
    exitedAt_ = std::chrono::system_clock::now();
  }
  return exited();
}

int PeerProcess::port() {
  if (port_ != 0) return port_;
  static const std::regex pattern("listening on 127\\.0\\.0\\.1:([0-9]+)");
  std::ifstream in(logPath_);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, pattern)) {
      port_ = std::stoi(m[1]);
      break;
    }
  }
  return port_;
}

std::uint64_t PeerProcess::step() {
  // Only what was appended since the last call, and only whole lines.
  std::ifstream in(metricsPath_, std::ios::binary);
  if (!in) return step_;
  in.seekg(static_cast<std::streamoff>(metricsRead_));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t end = chunk.rfind('\n');
  if (end == std::string::npos) return step_;
  std::istringstream lines(chunk.substr(0, end));
  std::string line;
  while (std::getline(lines, line)) {
    const double s = jsonNumber(line, "step");
    if (std::isfinite(s) && s >= 0) step_ = static_cast<std::uint64_t>(s);
  }
  metricsRead_ += end + 1;
  return step_;
}

std::string PeerProcess::log() const {
  std::ifstream in(logPath_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string PeerProcess::logTail(std::size_t lines) const {
  std::istringstream in(log());
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const std::string& l : last) out += (out.empty() ? "" : " | ") + l;
  return out;
}

std::string PeerProcess::resultLine() const {
  std::istringstream in(log());
  std::string line, result;
  while (std::getline(in, line)) {
    if (line.size() >= 2 && line.front() == '{' && line.back() == '}') result = line;
  }
  return result;
}

double jsonNumber(const std::string& line, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const std::size_t at = line.find(needle);
  if (at == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  const char* begin = line.c_str() + at + needle.size();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  return end == begin ? std::numeric_limits<double>::quiet_NaN() : value;
}

std::map<std::string, double> jsonNumbers(const std::string& line, const std::string& key) {
  std::map<std::string, double> out;
  const std::string needle = "\"" + key + "\":{";
  const std::size_t at = line.find(needle);
  if (at == std::string::npos) return out;
  const std::size_t end = line.find('}', at);
  if (end == std::string::npos) return out;
  // Flat: "name":number pairs, names without quotes or backslashes (the writer's metric names).
  std::size_t pos = at + needle.size();
  while (pos < end) {
    const std::size_t open = line.find('"', pos);
    const std::size_t close = open == std::string::npos ? open : line.find('"', open + 1);
    if (close == std::string::npos || close > end) break;
    const std::string name = line.substr(open + 1, close - open - 1);
    const double value = jsonNumber(line.substr(open, end - open), name);
    if (!std::isnan(value)) out[name] = value;
    pos = line.find(',', close);
    if (pos == std::string::npos) break;
    ++pos;
  }
  return out;
}

}  // namespace gossamer::bench
