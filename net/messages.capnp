# gossamer's wire schema: every frame's header is one `Header` message (see net/frame.h; the
# raw payload buffers travel beside it, described by the envelope's payload descriptors).
#
# Three kinds of header, in a union:
#   handshake  - the first frames on every link: protocol version, cluster id, peer id, listen
#                address, model fingerprint, and a mutual HMAC-SHA256 challenge-response over a
#                shared cluster secret (net/wire/handshake.h describes the exchange);
#   membership - SWIM-style membership control (join, ping, ping-req, ack, gossip, leave,
#                push-pull anti-entropy);
#   envelope   - ONE generic header for all algorithm traffic; net/ never interprets its kind.
#
# Engine and algorithm code never see these types: net/wire/codec.h converts them to plain C++
# structs, and decodes untrusted bytes with a traversal limit scaled to the frame size and a
# nesting limit. Evolution: only append fields and union members with the next ordinal; never
# renumber, retype or remove one (a peer built from the previous schema must still read ours).

@0xc7493980c6919355;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("gossamer::net::messages");

# Where a peer listens for links: a host name or address and a TCP port (or an inproc name).
struct Address {
  host @0 :Text;
  port @1 :UInt16;
}

# Element type of a payload buffer. `bytes` is opaque (the algorithm knows its layout).
enum Dtype {
  bytes @0;
  f32 @1;
  f64 @2;
  f16 @3;
  bf16 @4;
  i8 @5;
  u8 @6;
  i32 @7;
  i64 @8;
}

# ---------------------------------------------------------------------------------------------
# Handshake

# What two peers must agree on to train one model together.
struct ModelFingerprint {
  parameters @0 :UInt64;  # number of parameters in the flat buffer
  dtype @1 :Text;         # element type of the flat buffer, e.g. "f32"
  layoutHash @2 :UInt64;  # hash of the layer layout (names, shapes, offsets)
}

# One side's identity and configuration, as it introduces itself.
struct PeerInfo {
  protocolVersion @0 :UInt32;
  clusterId @1 :Text;
  peerId @2 :UInt64;
  listen @3 :Address;
  model @4 :ModelFingerprint;
  identityKey @5 :Data;   # the peer's Ed25519 public key (32 bytes; protocol version 2 on)
}

# Frame 1, client -> server: who the client is and a fresh 32-byte random challenge.
struct ClientHello {
  info @0 :PeerInfo;
  nonce @1 :Data;
  channel @2 :UInt8;  # what the client opens this link for (net/mesh: 0 control, 1 data)
}

# Frame 2, server -> client: who the server is, its own fresh 32-byte challenge, and
# HMAC-SHA256(secret, "server" transcript) over both hellos, which proves the server knows the
# secret and is live for the client's nonce.
struct ServerHello {
  info @0 :PeerInfo;
  nonce @1 :Data;
  tag @2 :Data;
  signature @3 :Data;  # the server's Ed25519 signature of the same transcript (its identity)
}

# Frame 3, client -> server: HMAC-SHA256(secret, "client" transcript), proving the client knows
# the secret and is live for the server's nonce.
struct ClientProof {
  tag @0 :Data;
  signature @1 :Data;  # the client's Ed25519 signature of the same transcript (its identity)
}

# Why a side refuses the handshake.
enum RefusalCode {
  authentication @0;  # an HMAC tag did not verify: wrong secret or a replayed handshake
  version @1;         # protocol versions differ
  cluster @2;         # cluster ids differ
  model @3;           # model fingerprints differ
  protocol @4;        # an unexpected or malformed handshake message
  identity @5;        # a signature did not verify, or the peer id is bound to another key
}

# Sent by either side instead of its next message (or as the server's verdict) to end the
# handshake; `reason` is human text for the remote's log and never contains the secret.
struct Refusal {
  code @0 :RefusalCode;
  reason @1 :Text;
}

struct Handshake {
  union {
    clientHello @0 :ClientHello;
    serverHello @1 :ServerHello;
    clientProof @2 :ClientProof;
    accept @3 :Void;         # frame 4, server -> client: the link is open for traffic
    refusal @4 :Refusal;     # frame 3 or 4 instead of the above: the link will be closed
  }
}

# ---------------------------------------------------------------------------------------------
# Membership (SWIM: failure detection by direct and indirect probes, dissemination of updates
# piggybacked on probes). A higher incarnation overrides a lower one for the same peer; at equal
# incarnation suspect overrides alive, and dead/left are final.

enum MemberState {
  alive @0;
  suspect @1;
  dead @2;
  left @3;
}

# One fact about one member, as gossiped.
struct MemberUpdate {
  peerId @0 :UInt64;
  address @1 :Address;
  incarnation @2 :UInt64;
  state @3 :MemberState;
  accuser @4 :UInt64;  # suspect: the member whose probes failed (0: unknown)
  identityKey @5 :Data;  # the member's Ed25519 public key (empty: not known to the sender)
  dialOutOnly @6 :Bool;  # the member says others cannot dial it (it reaches them on its links)
}

# A new peer asks a member (its seed) to be admitted.
struct JoinRequest {
  peerId @0 :UInt64;
  address @1 :Address;
  incarnation @2 :UInt64;
  dialOutOnly @3 :Bool;  # the joiner says it cannot be dialed (--no-inbound): no dial-back
}

# The seed's answer: on acceptance, the full member list as it knows it.
struct JoinReply {
  accepted @0 :Bool;
  reason @1 :Text;                    # why not, when refused
  members @2 :List(MemberUpdate);
  observed @3 :Text;                  # the address the seed saw the joiner's link come from
}

# Direct probe; the receiver answers with an Ack carrying the same sequence.
struct Ping {
  sender @0 :UInt64;
  sequence @1 :UInt64;
  updates @2 :List(MemberUpdate);     # piggybacked gossip
}

# Indirect probe: "please ping `target` for me and relay its ack".
struct PingReq {
  sender @0 :UInt64;
  sequence @1 :UInt64;
  target @2 :UInt64;
  targetAddress @3 :Address;
  updates @4 :List(MemberUpdate);
}

# Answer to a Ping (or relayed answer to a PingReq): `sender` is the peer that was probed.
struct Ack {
  sender @0 :UInt64;
  sequence @1 :UInt64;
  updates @2 :List(MemberUpdate);
}

# Updates pushed without a probe (e.g. to spread a leave or a refutation quickly).
struct Gossip {
  sender @0 :UInt64;
  updates @1 :List(MemberUpdate);
}

# A peer leaves voluntarily; members mark it `left` at this incarnation.
struct Leave {
  peerId @0 :UInt64;
  incarnation @1 :UInt64;
}

# Anti-entropy: the sender's whole member table (tombstones of dead and left members included).
# The receiver merges it and, unless `reply` is set, answers with its own table.
struct PushPull {
  sender @0 :UInt64;
  reply @1 :Bool;
  members @2 :List(MemberUpdate);
}

# The seed's dial-back to a joiner's advertised address, after it admitted it: whether a fresh
# link to `address` opened (connect and handshake), and where the joiner's own link came from.
struct Reachability {
  sender @0 :UInt64;
  dialable @1 :Bool;
  address @2 :Address;
  observed @3 :Text;
}

# Connection reversal: `requester` needs a link to `target` for `channel` (0 control, 1 data)
# and cannot dial it (the target is dial-out only). Sent on a link to the target, or to members
# that forward it once (`forwarded`) when they have a link to the target. The target dials the
# requester at the address its own member table holds, never one a message names.
struct Reverse {
  requester @0 :UInt64;
  target @1 :UInt64;
  channel @2 :UInt8;
  forwarded @3 :Bool;
}

# Hole punching: two dial-out-only members try a direct TCP connection by simultaneous open.
# `requester`, which needs a link to `target` for `channel`, asks members it reaches (the
# rendezvous); a rendezvous linked to both sends the request on to each of the two
# (`fromRendezvous`) with the hosts their links come from as it sees them. Each then connects from
# its own listen port to the other's host at the other's advertised port.
struct Punch {
  requester @0 :UInt64;
  target @1 :UInt64;
  channel @2 :UInt8;
  requesterHost @3 :Text;
  targetHost @4 :Text;
  fromRendezvous @5 :Bool;
}

struct Membership {
  union {
    joinRequest @0 :JoinRequest;
    joinReply @1 :JoinReply;
    ping @2 :Ping;
    pingReq @3 :PingReq;
    ack @4 :Ack;
    gossip @5 :Gossip;
    leave @6 :Leave;
    pushPull @7 :PushPull;
    reachability @8 :Reachability;
    reverse @9 :Reverse;
    punch @10 :Punch;
  }
}

# ---------------------------------------------------------------------------------------------
# Algorithm traffic

# One raw payload buffer that follows the header, in order.
struct PayloadDescriptor {
  size @0 :UInt64;      # bytes
  dtype @1 :Dtype;
  elements @2 :UInt64;  # element count (size / element size for typed buffers; for an encoded
                        # payload, the float32 elements it decodes to)
  encoding @3 :PayloadEncoding;  # how float32 data was compressed (absent: sent as is)
}

# The compression of a float32 payload (the layouts: kernels/codec.h). The receiver checks the
# bytes against it and decodes them into `elements` float32 values before anyone reads them.
struct PayloadEncoding {
  codec @0 :Codec;
  blockSize @1 :UInt32;   # int8, int4: elements per scale
  fraction @2 :Float64;   # topk, randk: the share of elements sent
  sampled @3 :Bool;       # topk: threshold from a sample (fewer than k values may come)

  enum Codec {
    none @0;
    fp16 @1;
    bf16 @2;
    int8 @3;
    int4 @4;
    topk @5;
    randk @6;
  }
}

# The one generic header of the engine's messages. net/ interprets none of it but `route`, and
# that only to count bytes per route (net/mesh); `kind`, the numbers and `control` mean what the
# engine and the algorithm say.
struct Envelope {
  tag @0 :UInt64;
  kind @1 :UInt32;
  sender @2 :UInt64;
  step @3 :UInt64;
  scalars @4 :List(Float64);      # a few real numbers: weights, push-sum mass, loss, ...
  payloads @5 :List(PayloadDescriptor);
  integers @6 :List(UInt64);      # a few exact integers: peer ids, transfer ids, fingerprints
  route @7 :Route;                # which part of the receiving peer takes it
  control @8 :Data;               # route `runtime`: the engine's own control message (its schema)
}

# Where an envelope goes in the receiving peer.
enum Route {
  inbox @0;    # queued for the algorithm on the compute thread
  serve @1;    # the algorithm's request handler on the io thread
  runtime @2;  # the peer runtime itself (status, barriers, snapshot pulls)
}

# ---------------------------------------------------------------------------------------------
# The frame header.

# ---- Relays (net/relay) ----------------------------------------------------------------------
#
# A relayed link: two members that cannot reach each other talk through a third. `source` opened
# the stream (number `stream`, its own choice) to `target`; the relay forwards each frame to the
# other end on its open link to it. The bytes of `data` are the frame's one payload: TLS records
# between the two ends, which the relay cannot read or forge.

enum RelayKind {
  open @0;   # source -> relay: `address` is the target's; relay -> target: the source's
  data @1;   # ciphertext, either way
  close @2;  # either way; `reason` says why (the relay refused, an end closed, a hop failed)
}

struct Relay {
  stream @0 :UInt64;
  source @1 :UInt64;
  target @2 :UInt64;
  kind @3 :RelayKind;
  address @4 :Address;
  reason @5 :Text;
}

struct Header {
  union {
    handshake @0 :Handshake;
    membership @1 :Membership;
    envelope @2 :Envelope;
    relay @3 :Relay;
  }
}
