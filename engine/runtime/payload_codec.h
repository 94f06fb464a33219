// Compression of payloads on the wire (gossamer-peer --compress CODEC --error-feedback on|off):
// the one place where the runtime encodes and decodes them.
//
// An algorithm marks the payloads of a message that may be compressed (Message::compressible).
// As the message leaves, on the compute thread, PayloadCodec::encode writes each marked payload
// in the run's codec (kernels/codec.h: fp16, bf16, blockwise int8/int4, top-k, random-k) into
// scratch memory of the Compute, fused with the error-feedback update of the residual the
// algorithm named; the staging then copies those bytes instead of the float32 ones, and each
// payload's descriptor says how it was encoded. A receiver needs no flag to read it: on the io
// thread, PayloadCodec::decode checks the bytes against their descriptor (a bound on the
// element count before anything is allocated, then kernels::checkEncoded) and decodes them into
// a float32 host buffer, so an algorithm always reads float32. A malformed payload is refused
// with a message naming the problem, and its message is dropped.
//
// Threading: encode() on the compute thread (it uses the peer's Compute); decode() and
// encodeReply() (serve()'s replies) on the io thread (they use a host Compute of their own). The
// two sides share nothing but the counters (atomic).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/algorithm.h"
#include "engine/runtime/staging.h"
#include "kernels/codec.h"
#include "kernels/compute.h"
#include "net/frame.h"
#include "net/wire/codec.h"

namespace gossamer::engine::runtime {

// The wire's description of a codec and back. codecOf throws gossamer::Error on an encoding no
// valid codec has (a block size or fraction out of range).
net::wire::PayloadEncoding encodingOf(const kernels::Codec& codec);
kernels::Codec codecOf(const net::wire::PayloadEncoding& encoding);

// A message's payloads as they travel, with their descriptors.
struct WirePayloads {
  OutgoingBytes bytes;
  std::vector<net::wire::PayloadDescriptor> descriptors;
};

// The payloads of `message` as they are: float32, with their descriptors.
WirePayloads rawPayloads(const Message& message);

// A received payload as float32 host memory, or why it was refused.
struct DecodedPayload {
  std::span<const float> data;
  std::shared_ptr<const void> owner;
  std::string error;  // non-empty: refused
};

class PayloadCodec {
 public:
  // `compute`: the peer's Compute (encode); `hostCompute`: a CPU Compute for the io thread
  // (decode); `slot(bytes)`: a host buffer for decoded floats (the staging's receive slots), or an
  // empty Payload when none is free (then one is allocated). `maxDecodedBytes` bounds the float32
  // bytes one payload may claim to decode to. `seed` draws random-k's positions.
  PayloadCodec(kernels::Compute& compute, kernels::Compute& hostCompute,
               PayloadCompression compression, std::uint64_t seed,
               std::function<net::Payload(std::size_t)> slot, std::size_t maxDecodedBytes);

  const PayloadCompression& compression() const { return compression_; }

  // Compute thread. The payloads of `message` as they will travel: float32 as they are, or, for
  // those it marks compressible when the run has a codec, encoded into scratch memory of the
  // Compute (updating their residuals when error feedback is on, and writing the decoded values
  // into the marks' `sent` spans). The encoded bytes stay valid
  // for operations enqueued before the next encode(), so they must be staged before it.
  // Throws gossamer::Error on a bad mark (an index past the payloads, a residual or a sent span
  // of the wrong length).
  WirePayloads encode(const Message& message);
  // Io thread: the same for a serve() reply, encoded with the host Compute (its residuals and
  // sent spans are host memory) into scratch of its own, valid until the next encodeReply().
  WirePayloads encodeReply(const Message& message);

  // Io thread. The float32 data of a received payload: `bytes` itself when it is float32, else
  // decoded per its descriptor.
  DecodedPayload decode(const net::wire::PayloadDescriptor& descriptor, net::Payload& payload);

  // Payloads sent encoded, and their float32 and wire bytes (for the metrics).
  std::uint64_t encodedPayloads() const { return encodedPayloads_; }
  std::uint64_t rawBytesEncoded() const { return rawBytes_; }
  std::uint64_t wireBytesEncoded() const { return wireBytes_; }

 private:
  WirePayloads encodeWith(kernels::Compute& compute, kernels::Buffer<std::byte>& buffer,
                          const Message& message);
  static std::span<std::byte> scratch(kernels::Compute& compute,
                                      kernels::Buffer<std::byte>& buffer, std::size_t bytes);

  kernels::Compute& compute_;
  kernels::Compute& hostCompute_;
  PayloadCompression compression_;
  std::uint64_t seed_;
  std::atomic<std::uint64_t> draws_{0};  // payloads encoded: each random-k draw its own seed
  std::function<net::Payload(std::size_t)> slot_;
  std::size_t maxDecodedBytes_;
  kernels::Buffer<std::byte> scratch_;       // compute thread
  kernels::Buffer<std::byte> replyScratch_;  // io thread
  std::atomic<std::uint64_t> encodedPayloads_{0}, rawBytes_{0}, wireBytes_{0};
};

}  // namespace gossamer::engine::runtime
