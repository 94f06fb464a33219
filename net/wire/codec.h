// Frame headers as plain C++ values, and their Cap'n Proto encoding (schema: net/messages.capnp).
// Engine and algorithm code use only these structs; no Cap'n Proto type appears here.
//
// Decoding treats the bytes as hostile: the segment table is validated against the bytes
// present before anything is allocated, the reader runs with a traversal limit of about
// 4x the frame's words + 1024 and a nesting limit of 16, and no exception leaves a decoder:
// every failure is Errc::malformedMessage. Encoders throw only std::bad_alloc.
// All functions are thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <variant>
#include <vector>

#include "net/endpoint.h"

namespace gossamer::net::wire {

// Element type of a payload buffer; values match messages.capnp's Dtype.
enum class Dtype : std::uint16_t { bytes, f32, f64, f16, bf16, i8, u8, i32, i64 };

// ---- Algorithm traffic --------------------------------------------------------------------

// How a float32 payload was compressed (messages.capnp's PayloadEncoding; the layouts and their
// checks are kernels/codec.h's, which net/ does not interpret). Codec values match the schema.
struct PayloadEncoding {
  enum class Codec : std::uint16_t { none, fp16, bf16, int8, int4, topk, randk };
  Codec codec = Codec::none;
  std::uint32_t blockSize = 0;
  double fraction = 0;
  bool sampled = false;
  friend bool operator==(const PayloadEncoding&, const PayloadEncoding&) = default;
};

struct PayloadDescriptor {
  std::uint64_t size = 0;  // bytes
  Dtype dtype = Dtype::bytes;
  std::uint64_t elements = 0;  // encoded: the float32 elements the payload decodes to
  PayloadEncoding encoding;
  friend bool operator==(const PayloadDescriptor&, const PayloadDescriptor&) = default;
};

// Where an envelope goes in the receiving peer; values match messages.capnp's Route.
enum class Route : std::uint16_t { inbox, serve, runtime };

// The one generic header of the engine's messages (see messages.capnp's Envelope).
struct EnvelopeHeader {
  std::uint64_t tag = 0;
  std::uint32_t kind = 0;  // algorithm-defined
  std::uint64_t sender = 0;
  std::uint64_t step = 0;
  std::vector<double> scalars;
  std::vector<PayloadDescriptor> payloads;  // one per raw payload buffer of the frame, in order
  std::vector<std::uint64_t> integers;
  Route route = Route::inbox;
  std::vector<std::byte> control;  // Route::runtime: the engine's control message, encoded
  friend bool operator==(const EnvelopeHeader&, const EnvelopeHeader&) = default;
};

// Decoded envelopes never hold more than these (a longer list is malformedMessage). The control
// bytes are bounded by the frame's header limit (net::Limits::maxHeaderBytes).
inline constexpr std::size_t kMaxEnvelopeScalars = 4096;
inline constexpr std::size_t kMaxEnvelopeIntegers = 4096;
inline constexpr std::size_t kMaxEnvelopePayloads = 1024;

// ---- Membership (SWIM) --------------------------------------------------------------------

enum class MemberState : std::uint16_t { alive, suspect, dead, left };

struct MemberUpdate {
  std::uint64_t peerId = 0;
  Endpoint address;
  std::uint64_t incarnation = 0;
  MemberState state = MemberState::alive;
  std::uint64_t accuser = 0;           // suspect: the member whose probes failed (0: unknown)
  std::vector<std::byte> identityKey;  // its Ed25519 public key; empty: not known to the sender
  bool dialOutOnly = false;            // it says others cannot dial it
  friend bool operator==(const MemberUpdate&, const MemberUpdate&) = default;
};

struct JoinRequest {
  std::uint64_t peerId = 0;
  Endpoint address;
  std::uint64_t incarnation = 0;
  bool dialOutOnly = false;  // --no-inbound: the seed does not dial it back
  friend bool operator==(const JoinRequest&, const JoinRequest&) = default;
};

struct JoinReply {
  bool accepted = false;
  std::string reason;
  std::vector<MemberUpdate> members;
  std::string observed;  // where the seed saw the joiner's link come from
  friend bool operator==(const JoinReply&, const JoinReply&) = default;
};

struct Ping {
  std::uint64_t sender = 0;
  std::uint64_t sequence = 0;
  std::vector<MemberUpdate> updates;
  friend bool operator==(const Ping&, const Ping&) = default;
};

struct PingReq {
  std::uint64_t sender = 0;
  std::uint64_t sequence = 0;
  std::uint64_t target = 0;
  Endpoint targetAddress;
  std::vector<MemberUpdate> updates;
  friend bool operator==(const PingReq&, const PingReq&) = default;
};

struct Ack {
  std::uint64_t sender = 0;  // the peer that was probed
  std::uint64_t sequence = 0;
  std::vector<MemberUpdate> updates;
  friend bool operator==(const Ack&, const Ack&) = default;
};

struct Gossip {
  std::uint64_t sender = 0;
  std::vector<MemberUpdate> updates;
  friend bool operator==(const Gossip&, const Gossip&) = default;
};

struct Leave {
  std::uint64_t peerId = 0;
  std::uint64_t incarnation = 0;
  friend bool operator==(const Leave&, const Leave&) = default;
};

// Anti-entropy: a whole member table; answered with the receiver's own unless `reply`.
struct PushPull {
  std::uint64_t sender = 0;
  bool reply = false;
  std::vector<MemberUpdate> members;
  friend bool operator==(const PushPull&, const PushPull&) = default;
};

// The seed's dial-back to a joiner's advertised address: whether it opened.
struct Reachability {
  std::uint64_t sender = 0;
  bool dialable = false;
  Endpoint address;      // what was dialed: the joiner's advertised address
  std::string observed;  // where the joiner's own link came from
  friend bool operator==(const Reachability&, const Reachability&) = default;
};

// Connection reversal: `requester` asks `target`, which cannot be dialed, to open the link for
// `channel` itself (net/membership/membership.h).
struct Reverse {
  std::uint64_t requester = 0;
  std::uint64_t target = 0;
  std::uint8_t channel = 0;
  bool forwarded = false;  // by a member linked to the target (forwarded once, never again)
  friend bool operator==(const Reverse&, const Reverse&) = default;
};

// Hole punching between two dial-out-only members, through a member linked to both (the
// rendezvous), which fills in the hosts it sees their links come from (net/membership).
struct Punch {
  std::uint64_t requester = 0;
  std::uint64_t target = 0;
  std::uint8_t channel = 0;
  std::string requesterHost;  // set by the rendezvous
  std::string targetHost;     // set by the rendezvous
  bool fromRendezvous = false;
  friend bool operator==(const Punch&, const Punch&) = default;
};

using MembershipMessage = std::variant<JoinRequest, JoinReply, Ping, PingReq, Ack, Gossip, Leave,
                                       PushPull, Reachability, Reverse, Punch>;

// ---- Handshake (used by net/wire/handshake.h; public for tests and tools) -----------------

struct ModelFingerprint {
  std::uint64_t parameters = 0;
  std::string dtype = "f32";
  std::uint64_t layoutHash = 0;
  friend bool operator==(const ModelFingerprint&, const ModelFingerprint&) = default;
};

// One side's introduction.
struct PeerInfo {
  std::uint32_t protocolVersion = 0;
  std::string clusterId;
  std::uint64_t peerId = 0;
  Endpoint listen;
  ModelFingerprint model;
  std::vector<std::byte> identityKey;  // Ed25519 public key
  friend bool operator==(const PeerInfo&, const PeerInfo&) = default;
};

struct ClientHello {
  PeerInfo info;
  std::vector<std::byte> nonce;
  std::uint8_t channel = 0;  // what the client opens the link for (the mesh's channels)
  friend bool operator==(const ClientHello&, const ClientHello&) = default;
};

struct ServerHello {
  PeerInfo info;
  std::vector<std::byte> nonce;
  std::vector<std::byte> tag;        // HMAC-SHA256 over the "server" transcript
  std::vector<std::byte> signature;  // Ed25519 over the same transcript
  friend bool operator==(const ServerHello&, const ServerHello&) = default;
};

struct ClientProof {
  std::vector<std::byte> tag;        // HMAC-SHA256 over the "client" transcript
  std::vector<std::byte> signature;  // Ed25519 over the same transcript
  friend bool operator==(const ClientProof&, const ClientProof&) = default;
};

struct HandshakeAccept {
  friend bool operator==(const HandshakeAccept&, const HandshakeAccept&) = default;
};

enum class RefusalCode : std::uint16_t {
  authentication,
  version,
  cluster,
  model,
  protocol,
  identity
};

struct HandshakeRefusal {
  RefusalCode code = RefusalCode::protocol;
  std::string reason;
  friend bool operator==(const HandshakeRefusal&, const HandshakeRefusal&) = default;
};

using HandshakeMessage =
    std::variant<ClientHello, ServerHello, ClientProof, HandshakeAccept, HandshakeRefusal>;

// ---- Relays (net/relay) -------------------------------------------------------------------

enum class RelayKind : std::uint16_t { open, data, close };

// One frame of a relayed stream (messages.capnp's Relay); a `data` frame's bytes are its payload.
struct RelayHeader {
  std::uint64_t stream = 0;
  std::uint64_t source = 0;  // the end that opened the stream
  std::uint64_t target = 0;  // the other end
  RelayKind kind = RelayKind::data;
  Endpoint address;    // open: the target's (to the relay), the source's (from the relay)
  std::string reason;  // close
  friend bool operator==(const RelayHeader&, const RelayHeader&) = default;
};

// ---- The frame header ---------------------------------------------------------------------

// The decoded union of messages.capnp's Header.
using Header = std::variant<HandshakeMessage, MembershipMessage, EnvelopeHeader, RelayHeader>;

// Decodes one frame header from untrusted bytes into `out`. Returns Errc::malformedMessage for
// anything that is not exactly one well-formed message within the limits (odd size, bad segment
// table, trailing bytes, out-of-bounds or looping pointers, traversal or nesting limit exceeded,
// unknown union member or enum value, over-long lists); `out` is then unspecified. Never throws;
// allocates only after the segment table matched the size of `bytes`, at most a copy of them
// plus the decoded values.
std::error_code decodeHeader(std::span<const std::byte> bytes, Header& out);

// Encodes a header as a flat Cap'n Proto message (segment table included). Total function:
// every value of the structs encodes, and decodeHeader(encodeHeader(h)) yields h again.
std::vector<std::byte> encodeHeader(const Header& header);

// Shorthands for the common cases. The decoders also fail with Errc::unexpectedMessage when the
// header is well formed but of another kind.
std::vector<std::byte> encodeEnvelope(const EnvelopeHeader& envelope);
std::error_code decodeEnvelope(std::span<const std::byte> bytes, EnvelopeHeader& out);
std::vector<std::byte> encodeMembership(const MembershipMessage& message);
std::error_code decodeMembership(std::span<const std::byte> bytes, MembershipMessage& out);
std::vector<std::byte> encodeHandshake(const HandshakeMessage& message);
std::error_code decodeHandshake(std::span<const std::byte> bytes, HandshakeMessage& out);
std::vector<std::byte> encodeRelay(const RelayHeader& relay);

// The decoder's limits for a frame of `bytes` bytes (exposed for tests and tools).
inline constexpr std::size_t kMaxSegments = 64;
inline constexpr int kNestingLimit = 16;
std::uint64_t traversalLimitWords(std::size_t bytes);

}  // namespace gossamer::net::wire
