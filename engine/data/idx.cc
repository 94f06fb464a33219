#include "engine/data/idx.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <system_error>
#include <vector>

#include <zlib.h>

#include "engine/base/enforce.h"

namespace gossamer::engine::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // uint8 elements, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // uint8 elements, 1 dimension
// Upper bound on one file's payload, checked from the header before anything is allocated: a
// corrupt or hostile header must not be able to request gigabytes.
constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{1} << 31;
// Up to this many floats are reserved from the header's claim; beyond it the buffer grows only as
// decompressed data actually arrives, so a lying header cannot reserve memory it never fills.
constexpr std::uint64_t kEagerReserveFloats = std::uint64_t{64} << 20;
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr int kMaxClasses = 256;

constexpr const char* kInstallHint =
    "install the Debian package (apt-get install dataset-fashion-mnist) or pass --data-dir with "
    "a directory holding the IDX files";

struct GzClose {
  void operator()(gzFile file) const { gzclose(file); }
};

// An open IDX file; every error it throws names the file.
class IdxFile {
 public:
  explicit IdxFile(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    const auto status = std::filesystem::status(path_, ec);
    if (!std::filesystem::exists(status)) {
      GOSSAMER_THROW("IDX file '{}' does not exist: {}", path_, kInstallHint);
    }
    if (std::filesystem::is_directory(status)) {
      GOSSAMER_THROW("IDX file '{}' is a directory, not a file", path_);
    }
    errno = 0;
    file_.reset(gzopen(path_.c_str(), "rb"));
    if (!file_) {
      GOSSAMER_THROW("cannot open IDX file '{}': {}", path_,
                     errno != 0 ? std::strerror(errno) : "zlib could not allocate its state");
    }
    gzbuffer(file_.get(), 1u << 17);
  }

  // Validates the magic number and returns the dimensions that follow it.
  template <std::size_t kDims>
  std::array<std::uint32_t, kDims> readHeader(std::uint32_t magic, const char* kind) {
    const std::uint32_t got = readWord("magic number");
    if (got != magic) {
      const char* hint = "";
      if (got == kImagesMagic) hint = " (this is an IDX images file)";
      if (got == kLabelsMagic) hint = " (this is an IDX labels file)";
      if (got == __builtin_bswap32(magic)) hint = " (byte-swapped: not big-endian IDX?)";
      if ((got >> 16) == 0x1F8B) hint = " (gzip'd twice?)";
      GOSSAMER_THROW("'{}' is not an IDX {} file: magic number 0x{:08X}, expected 0x{:08X}{}",
                     path_, kind, got, magic, hint);
    }
    std::array<std::uint32_t, kDims> dims{};
    for (auto& dim : dims) dim = readWord("header dimensions");
    return dims;
  }

  // Reads exactly `size` payload bytes, handing each chunk to `consume(const uint8_t*, size_t)`.
  template <typename Consume>
  void readPayload(std::uint64_t size, const char* what, Consume&& consume) {
    std::vector<unsigned char> chunk(
        static_cast<std::size_t>(std::min<std::uint64_t>(size, kChunkBytes)));
    std::uint64_t done = 0;
    while (done < size) {
      const auto want =
          static_cast<std::size_t>(std::min<std::uint64_t>(size - done, chunk.size()));
      const std::size_t got = readSome(chunk.data(), want);
      if (got == 0) truncated(what, size, done);
      consume(chunk.data(), got);
      done += got;
    }
  }

 private:
  std::uint32_t readWord(const char* what) {
    unsigned char bytes[4];
    std::size_t done = 0;
    while (done < 4) {
      const std::size_t got = readSome(bytes + done, 4 - done);
      if (got == 0) truncated(what, 4, done);
      done += got;
    }
    return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
           (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
  }

  // Returns 0 at end of data; throws on a zlib or system error.
  std::size_t readSome(unsigned char* dst, std::size_t size) {
    const int got =
        gzread(file_.get(), dst, static_cast<unsigned>(std::min<std::size_t>(size, INT_MAX)));
    if (got < 0) GOSSAMER_THROW("cannot read IDX file '{}': {}", path_, zlibError());
    return static_cast<std::size_t>(got);
  }

  [[noreturn]] void truncated(const char* what, std::uint64_t expected, std::uint64_t got) {
    // A truncated gzip member is not a read error for gzread, but gzerror still says so.
    int code = Z_OK;
    gzerror(file_.get(), &code);
    const std::string detail = code == Z_OK ? std::string() : " (" + zlibError() + ")";
    GOSSAMER_THROW("IDX file '{}' is truncated: expected {} bytes of {}, got {}{}", path_, expected,
                   what, got, detail);
  }

  // gzerror's text, without the "<path>: " prefix zlib puts on it (our messages name the file).
  std::string zlibError() {
    int code = Z_OK;
    const char* raw = gzerror(file_.get(), &code);
    if (code == Z_ERRNO) return std::strerror(errno);
    std::string message = raw != nullptr ? raw : "unknown zlib error";
    const std::string prefix = path_ + ": ";
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    if (code == Z_DATA_ERROR) return "corrupt gzip data: " + message;
    return message;
  }

  std::string path_;
  std::unique_ptr<gzFile_s, GzClose> file_;
};

// Rejects zero and absurd sizes before anything is allocated.
std::uint64_t checkedPayload(const std::string& path, const char* kind,
                             std::initializer_list<std::uint32_t> dims) {
  std::uint64_t bytes = 1;
  for (const std::uint32_t dim : dims) {
    if (dim == 0) GOSSAMER_THROW("IDX {} file '{}' has a zero dimension", kind, path);
    // bytes <= 2^31 and dim < 2^32, so the product cannot overflow 64 bits.
    bytes *= dim;
    if (bytes > kMaxPayloadBytes) {
      GOSSAMER_THROW(
          "IDX {} file '{}' has absurd dimensions ({} bytes of data or more, limit {}): "
          "corrupt header?",
          kind, path, bytes, kMaxPayloadBytes);
    }
  }
  return bytes;
}

}  // namespace

Dataset loadIdx(const std::string& imagesPath, const std::string& labelsPath, std::string name) {
  IdxFile images(imagesPath);
  IdxFile labels(labelsPath);
  const auto [imageCount, rows, cols] = images.readHeader<3>(kImagesMagic, "images");
  const auto [labelCount] = labels.readHeader<1>(kLabelsMagic, "labels");
  const std::uint64_t pixelBytes = checkedPayload(imagesPath, "images", {imageCount, rows, cols});
  const std::uint64_t labelBytes = checkedPayload(labelsPath, "labels", {labelCount});
  if (imageCount != labelCount) {
    GOSSAMER_THROW("IDX pair does not match: '{}' holds {} images but '{}' holds {} labels",
                   imagesPath, imageCount, labelsPath, labelCount);
  }

  Dataset out;
  out.name = std::move(name);
  out.features = std::size_t{rows} * cols;

  out.labels.reserve(labelCount);
  int maxLabel = 0;
  labels.readPayload(labelBytes, "labels", [&](const unsigned char* data, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i) {
      maxLabel = std::max<int>(maxLabel, data[i]);
      out.labels.push_back(data[i]);
    }
  });
  // uint8 labels bound this already; the check keeps the Dataset contract explicit should wider
  // label types ever be read.
  if (maxLabel + 1 > kMaxClasses) {
    GOSSAMER_THROW("IDX labels file '{}' has label {}: at most {} classes are supported",
                   labelsPath, maxLabel, kMaxClasses);
  }
  out.classes = static_cast<std::size_t>(maxLabel) + 1;

  std::array<float, 256> scale{};
  for (std::size_t v = 0; v < scale.size(); ++v) scale[v] = static_cast<float>(v) / 255.0f;
  out.inputs.reserve(static_cast<std::size_t>(std::min(pixelBytes, kEagerReserveFloats)));
  images.readPayload(pixelBytes, "pixels", [&](const unsigned char* data, std::size_t size) {
    const std::size_t begin = out.inputs.size();
    out.inputs.resize(begin + size);
    float* dst = out.inputs.data() + begin;
    for (std::size_t i = 0; i < size; ++i) dst[i] = scale[data[i]];
  });
  return out;
}

Dataset loadFashionMnist(const std::string& dir, Split split) {
  const bool train = split == Split::kTrain;
  const std::filesystem::path root(dir);
  const std::string images =
      (root / (train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz")).string();
  const std::string labels =
      (root / (train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz")).string();
  for (const std::string& path : {images, labels}) {
    if (!std::filesystem::exists(path)) {
      GOSSAMER_THROW("Fashion-MNIST file '{}' not found: {}", path, kInstallHint);
    }
  }
  return loadIdx(images, labels, train ? "fashion-mnist-train" : "fashion-mnist-test");
}

}  // namespace gossamer::engine::data
