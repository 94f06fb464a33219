// Sample headers and hand-built hostile frames, shared by tests/net/wire_test.cc and the fuzz
// seed-corpus generator (tests/fuzz/make_corpus.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "net/wire/codec.h"

namespace gossamer::net::testing {

// One of every kind of header, with non-default values in every field.
inline std::vector<wire::Header> sampleHeaders() {
  using namespace wire;
  const std::vector<std::byte> key(32, std::byte{0x3c});
  const std::vector<std::byte> signature(64, std::byte{0xc3});
  const MemberUpdate a{11, Endpoint{"10.0.0.1", 7001}, 3, MemberState::alive, 0, key};
  const MemberUpdate b{12, Endpoint{"host-b.example", 7002}, 9, MemberState::suspect, 0, {}, true};
  const MemberUpdate c{13, Endpoint{"::1", 65535}, 1, MemberState::dead};
  const MemberUpdate d{std::numeric_limits<std::uint64_t>::max(), Endpoint{"", 0}, 0,
                       MemberState::left};
  const PeerInfo info{2,
                      "cluster-a",
                      42,
                      Endpoint{"127.0.0.1", 7000},
                      ModelFingerprint{235146, "f32", 0xfeedfacecafebeefULL},
                      key};
  const std::vector<std::byte> nonce(32, std::byte{0x5a});
  const std::vector<std::byte> tag(32, std::byte{0xa5});
  return {
      EnvelopeHeader{},
      EnvelopeHeader{7,
                     3,
                     42,
                     1000,
                     {0.5, -1.25, 1e300, std::numeric_limits<double>::infinity()},
                     {{400, Dtype::f32, 100}, {16, Dtype::i64, 2}, {3, Dtype::bytes, 3}}},
      EnvelopeHeader{std::numeric_limits<std::uint64_t>::max(), 0xffffffffu, 1, 2, {}, {}},
      EnvelopeHeader{5,
                     1,
                     9,
                     3,
                     {},
                     {{8, Dtype::f32, 2}},
                     {0, 1, std::numeric_limits<std::uint64_t>::max()},
                     Route::serve,
                     {}},
      EnvelopeHeader{0, 0, 9, 0, {}, {}, {}, Route::runtime, nonce},
      MembershipMessage{JoinRequest{42, Endpoint{"127.0.0.1", 7000}, 1}},
      MembershipMessage{JoinRequest{43, Endpoint{"10.1.2.3", 7001}, 2, true}},
      MembershipMessage{JoinReply{true, "", {a, b, c, d}, "203.0.113.9:51234"}},
      MembershipMessage{JoinReply{false, "cluster is full", {}}},
      MembershipMessage{Ping{42, 17, {a}}},
      MembershipMessage{PingReq{42, 18, 13, Endpoint{"::1", 65535}, {b, c}}},
      MembershipMessage{Ack{13, 18, {}}},
      MembershipMessage{Gossip{42, {c, d}}},
      MembershipMessage{Leave{42, 4}},
      MembershipMessage{PushPull{42, false, {a, b, c, d}}},
      MembershipMessage{PushPull{13, true, {}}},
      MembershipMessage{Reachability{42, false, Endpoint{"10.0.0.7", 7000}, "198.51.100.2:4000"}},
      MembershipMessage{Reachability{42, true, Endpoint{"10.0.0.8", 7000}, ""}},
      MembershipMessage{Reverse{42, 13, 1, false}},
      MembershipMessage{Reverse{42, 13, 0, true}},
      MembershipMessage{Punch{42, 13, 1, "", "", false}},
      MembershipMessage{Punch{42, 13, 0, "203.0.113.11", "203.0.113.12", true}},
      RelayHeader{7, 42, 13, RelayKind::open, Endpoint{"192.168.2.2", 7000}, ""},
      RelayHeader{std::numeric_limits<std::uint64_t>::max(), 42, 13, RelayKind::data, {}, ""},
      RelayHeader{7, 42, 13, RelayKind::close, {}, "this member does not relay"},
      HandshakeMessage{ClientHello{info, nonce}},
      HandshakeMessage{ServerHello{info, nonce, tag, signature}},
      HandshakeMessage{ClientProof{tag, signature}},
      HandshakeMessage{HandshakeAccept{}},
      HandshakeMessage{HandshakeRefusal{RefusalCode::model, "model fingerprint differs"}},
      HandshakeMessage{HandshakeRefusal{RefusalCode::identity, "peer id bound to another key"}},
  };
}

// A single-segment frame from raw little-endian words (segment table included).
inline std::vector<std::byte> frameFromWords(const std::vector<std::uint64_t>& words) {
  std::vector<std::byte> out(8 + 8 * words.size());
  const auto count = static_cast<std::uint32_t>(words.size());
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<std::byte>(count >> (8 * i));
  for (std::size_t w = 0; w < words.size(); ++w) {
    for (int i = 0; i < 8; ++i) out[8 + 8 * w + i] = static_cast<std::byte>(words[w] >> (8 * i));
  }
  return out;
}

// Cap'n Proto pointers: struct (offset in words from the pointer's end, data words, pointers)
// and list (offset, element size code, element count or, for code 7, word count).
inline std::uint64_t structPointer(std::int32_t offset, std::uint16_t data, std::uint16_t ptrs) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(offset) << 2)) |
         (std::uint64_t{data} << 32) | (std::uint64_t{ptrs} << 48);
}
inline std::uint64_t listPointer(std::int32_t offset, unsigned sizeCode, std::uint32_t count) {
  return 1 | (static_cast<std::uint64_t>(static_cast<std::uint32_t>(offset) << 2)) |
         (std::uint64_t{sizeCode} << 32) | (std::uint64_t{count} << 35);
}

// 24 bytes whose segment table claims 2^32 - 1 words (32 GiB).
inline std::vector<std::byte> hugeSegmentClaim() {
  std::vector<std::byte> out(24, std::byte{0});
  for (int i = 4; i < 8; ++i) out[i] = std::byte{0xff};
  return out;
}

// 24 bytes whose segment table claims 2^32 segments.
inline std::vector<std::byte> segmentCountClaim() {
  std::vector<std::byte> out(24, std::byte{0});
  for (int i = 0; i < 8; ++i) out[i] = std::byte{0xff};
  return out;
}

// A 72-byte membership gossip whose update list claims 2^29 - 1 zero-sized elements: legal
// Cap'n Proto that the default 64 MiB traversal limit would let a reader walk element by
// element; the frame-scaled limit rejects it.
inline std::vector<std::byte> amplifiedList(std::uint32_t elements = (1u << 29) - 1) {
  return frameFromWords({
      structPointer(0, 1, 1),        // root -> Header
      1,                             // Header: union tag 1 = membership
      structPointer(0, 1, 1),        // -> Membership
      5,                             // Membership: union tag 5 = gossip
      structPointer(0, 1, 1),        // -> Gossip
      42,                            // Gossip.sender
      listPointer(0, 7, 0),          // Gossip.updates: inline composite, 0 words of content
      std::uint64_t{elements} << 2,  // tag: `elements` structs of 0 data words, 0 pointers
  });
}

// A frame whose Header.handshake pointer points back at the Header itself.
inline std::vector<std::byte> selfReference() {
  return frameFromWords({
      structPointer(0, 1, 1),   // root -> Header at word 1
      0,                        // Header: union tag 0 = handshake
      structPointer(-2, 1, 1),  // -> word 1 again (the pointer ends at word 3)
  });
}

// Input for fuzzHandshake's raw scenario: byte 0 then length-prefixed frames.
inline std::vector<std::uint8_t> rawHandshakeInput(
    bool testClient, const std::vector<std::vector<std::byte>>& frames) {
  std::vector<std::uint8_t> out{static_cast<std::uint8_t>(testClient ? 1 : 0)};
  for (const auto& frame : frames) {
    out.push_back(static_cast<std::uint8_t>(frame.size()));
    out.push_back(static_cast<std::uint8_t>(frame.size() >> 8));
    for (std::byte b : frame) out.push_back(static_cast<std::uint8_t>(b));
  }
  return out;
}

}  // namespace gossamer::net::testing
