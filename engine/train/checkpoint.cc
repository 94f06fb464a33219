#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <zlib.h>

#include "engine/base/enforce.h"

namespace gossamer::engine::train {
namespace {

constexpr char kMagic[8] = {'G', 'S', 'M', 'R', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;

class Writer {
 public:
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  template <typename T>
  void pod(T value) {
    bytes(&value, sizeof value);
  }
  void string32(const std::string& s) {
    pod(static_cast<std::uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  std::vector<char>& data() { return out_; }

 private:
  std::vector<char> out_;
};

// Reads from a fully loaded file, checking every length against what is left before using it.
class Reader {
 public:
  Reader(const std::vector<char>& data, std::size_t end, const std::string& path)
      : data_(data), end_(end), path_(path) {}
  void bytes(void* out, std::size_t n, const char* what) {
    GOSSAMER_ENFORCE(n <= end_ - pos_, "checkpoint {} is truncated or corrupt: {} needs {} bytes, "
                     "{} left", path_, what, n, end_ - pos_);
    std::memcpy(out, data_.data() + pos_, n);
    pos_ += n;
  }
  template <typename T>
  T pod(const char* what) {
    T value;
    bytes(&value, sizeof value, what);
    return value;
  }
  std::string string32(const char* what) {
    const auto n = pod<std::uint32_t>(what);
    GOSSAMER_ENFORCE(n <= end_ - pos_, "checkpoint {} is corrupt: {} of {} bytes, {} left", path_,
                     what, n, end_ - pos_);
    std::string s(n, '\0');
    bytes(s.data(), n, what);
    return s;
  }
  std::size_t remaining() const { return end_ - pos_; }

 private:
  const std::vector<char>& data_;
  std::size_t end_;
  std::size_t pos_ = 0;
  const std::string& path_;
};

std::uint32_t crcOf(const char* data, std::size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

void writeAllOrThrow(int fd, const char* data, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t written = ::write(fd, data, n);
    if (written < 0 && errno == EINTR) continue;
    GOSSAMER_ENFORCE(written > 0, "cannot write checkpoint {}: {}", path, std::strerror(errno));
    data += written;
    n -= static_cast<std::size_t>(written);
  }
}

}  // namespace

std::int64_t Checkpoint::metaInt(const std::string& key) const {
  const std::string& text = metaString(key);
  try {
    std::size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  GOSSAMER_THROW("checkpoint field '{}' is not an integer: '{}'", key, text);
}

const std::string& Checkpoint::metaString(const std::string& key) const {
  auto it = meta.find(key);
  GOSSAMER_ENFORCE(it != meta.end(), "checkpoint has no field '{}'", key);
  return it->second;
}

const std::vector<float>& Checkpoint::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  GOSSAMER_ENFORCE(it != tensors.end(), "checkpoint has no tensor '{}'", name);
  return it->second;
}

void saveCheckpoint(const std::string& path, const Checkpoint& checkpoint) {
  Writer w;
  w.bytes(kMagic, sizeof kMagic);
  w.pod(kVersion);
  w.pod(checkpoint.fingerprint);
  w.pod(static_cast<std::uint32_t>(checkpoint.tensors.size()));
  w.pod(static_cast<std::uint32_t>(checkpoint.meta.size()));
  for (const auto& [name, values] : checkpoint.tensors) {
    w.string32(name);
    w.pod(static_cast<std::uint64_t>(values.size()));
    w.bytes(values.data(), values.size() * sizeof(float));
  }
  for (const auto& [key, value] : checkpoint.meta) {
    w.string32(key);
    w.string32(value);
  }
  w.pod(crcOf(w.data().data(), w.data().size()));

  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GOSSAMER_ENFORCE(!ec, "cannot create checkpoint directory {}: {}", dir.string(), ec.message());
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  GOSSAMER_ENFORCE(fd >= 0, "cannot create checkpoint {}: {}", temp, std::strerror(errno));
  try {
    writeAllOrThrow(fd, w.data().data(), w.data().size(), temp);
    GOSSAMER_ENFORCE(::fsync(fd) == 0, "cannot fsync checkpoint {}: {}", temp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  GOSSAMER_ENFORCE(::rename(temp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", temp,
                   path, std::strerror(errno));
  // Persist the rename itself.
  const int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
}

Checkpoint loadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GOSSAMER_ENFORCE(in.good(), "cannot open checkpoint {}: {}", path, std::strerror(errno));
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t kHeader = sizeof kMagic + 4 + 8 + 4 + 4;
  GOSSAMER_ENFORCE(data.size() >= kHeader + 4, "checkpoint {} is truncated ({} bytes)", path,
                   data.size());
  GOSSAMER_ENFORCE(std::memcmp(data.data(), kMagic, sizeof kMagic) == 0,
                   "{} is not a gossamer checkpoint (bad magic)", path);
  std::uint32_t storedCrc;
  std::memcpy(&storedCrc, data.data() + data.size() - 4, 4);
  const std::uint32_t actualCrc = crcOf(data.data(), data.size() - 4);
  GOSSAMER_ENFORCE(storedCrc == actualCrc,
                   "checkpoint {} is corrupt: CRC-32 mismatch (stored {:08x}, computed {:08x})",
                   path, storedCrc, actualCrc);

  Reader r(data, data.size() - 4, path);
  char magic[sizeof kMagic];
  r.bytes(magic, sizeof magic, "magic");
  const auto version = r.pod<std::uint32_t>("version");
  GOSSAMER_ENFORCE(version == kVersion, "checkpoint {} has format version {}, this build reads {}",
                   path, version, kVersion);
  Checkpoint checkpoint;
  checkpoint.fingerprint = r.pod<std::uint64_t>("fingerprint");
  const auto tensorCount = r.pod<std::uint32_t>("tensor count");
  const auto metaCount = r.pod<std::uint32_t>("meta count");
  for (std::uint32_t i = 0; i < tensorCount; ++i) {
    std::string name = r.string32("tensor name");
    const auto count = r.pod<std::uint64_t>("tensor size");
    GOSSAMER_ENFORCE(count <= r.remaining() / sizeof(float),
                     "checkpoint {} is corrupt: tensor '{}' claims {} floats, {} bytes left", path,
                     name, count, r.remaining());
    std::vector<float> values(count);
    r.bytes(values.data(), count * sizeof(float), "tensor data");
    checkpoint.tensors.emplace(std::move(name), std::move(values));
  }
  for (std::uint32_t i = 0; i < metaCount; ++i) {
    std::string key = r.string32("meta key");
    checkpoint.meta.emplace(std::move(key), r.string32("meta value"));
  }
  GOSSAMER_ENFORCE(r.remaining() == 0, "checkpoint {} is corrupt: {} trailing bytes", path,
                   r.remaining());
  return checkpoint;
}

}  // namespace gossamer::engine::train
