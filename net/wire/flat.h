// Cap'n Proto messages in the standard stream framing (segment table, then segments), written,
// and read from untrusted bytes within limits scaled to their size. Used by net/wire's codec and
// by the engine's own schemas (engine/runtime/control.capnp). Includes Cap'n Proto: sources
// include it, public headers never do.
//
// Reading validates the segment table against the bytes present before allocating anything,
// copies exactly the claimed words to aligned memory, and reads with a traversal limit of about
// 4x the frame's words + 1024 and a nesting limit of 16 (a 24-byte hostile frame cannot make the
// reader walk millions of list elements). Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <system_error>
#include <vector>

#include <capnp/message.h>
#include <kj/array.h>
#include <kj/exception.h>

#include "net/errors.h"
#include "net/wire/codec.h"  // the limits: kMaxSegments, kNestingLimit, traversalLimitWords

namespace gossamer::net::wire {

// Thrown by a conversion from Cap'n Proto to plain values for a well-formed message that the
// schema's user does not allow (an unknown enum value or union member, an over-long list);
// readFlat() turns it into Errc::malformedMessage.
struct Malformed {};

namespace detail {

// The words of a flat message whose segment table matched its size, in aligned memory.
struct FlatSegments {
  kj::Array<capnp::word> words;
  std::vector<kj::ArrayPtr<const capnp::word>> segments;
};

// Errc::malformedMessage unless `bytes` is a segment table (at most kMaxSegments, no empty first
// segment) followed by exactly the words it claims; allocates only after that check.
std::error_code loadSegments(std::span<const std::byte> bytes, FlatSegments& out);

}  // namespace detail

// Reads `bytes` as one flat message whose root is `Root` and calls convert(Root::Reader) on it.
// Every failure, including a Malformed or a kj::Exception thrown by convert, is
// Errc::malformedMessage; never throws.
template <typename Root, typename Convert>
std::error_code readFlat(std::span<const std::byte> bytes, Convert&& convert) {
  try {
    detail::FlatSegments flat;
    if (const std::error_code error = detail::loadSegments(bytes, flat)) return error;
    capnp::ReaderOptions options;
    options.traversalLimitInWords = traversalLimitWords(bytes.size());
    options.nestingLimit = kNestingLimit;
    capnp::SegmentArrayMessageReader reader(
        kj::arrayPtr(flat.segments.data(), flat.segments.size()), options);
    convert(reader.getRoot<Root>());
    return {};
  } catch (const Malformed&) {
    return Errc::malformedMessage;
  } catch (const kj::Exception&) {
    return Errc::malformedMessage;
  } catch (const std::exception&) {
    return Errc::malformedMessage;
  }
}

// The message in the standard framing: segment table (count - 1, sizes in words, padded to a
// word), then the segments. Throws only std::bad_alloc.
std::vector<std::byte> flatten(capnp::MessageBuilder& builder);

}  // namespace gossamer::net::wire
