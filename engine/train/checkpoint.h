// Per-peer checkpoints: named float tensors (params, optimizer state) and string metadata
// (step, epoch, optimizer, ...) in one self-checking binary file.
//
// Format (little-endian): "GSMRCKPT" | u32 version | u64 layout fingerprint | u32 tensor count |
// u32 meta count | tensors: u32 name length, name, u64 float count, floats | meta: u32 key
// length, key, u32 value length, value | u32 CRC-32 of everything before it.
//
// Writes are atomic (temp file, fsync, rename, fsync of the directory): a crash leaves either
// the old checkpoint or the new one. Loads verify magic, version, sizes (before allocating) and
// the CRC, so a corrupt file is rejected whole with an error naming the file and never
// half-loaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gossamer::engine::train {

struct Checkpoint {
  std::uint64_t fingerprint = 0;  // ParamLayout::fingerprint() of the model it belongs to
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, std::string> meta;

  // Typed access to meta; throws gossamer::Error naming the key when missing or malformed.
  std::int64_t metaInt(const std::string& key) const;
  const std::string& metaString(const std::string& key) const;
  const std::vector<float>& tensor(const std::string& name) const;
};

void saveCheckpoint(const std::string& path, const Checkpoint& checkpoint);
Checkpoint loadCheckpoint(const std::string& path);

}  // namespace gossamer::engine::train
