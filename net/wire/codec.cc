#include "net/wire/codec.h"

#include <type_traits>

#include <capnp/message.h>

#include "net/errors.h"
#include "net/messages.capnp.h"
#include "net/wire/flat.h"

namespace gossamer::net::wire {
namespace {

namespace m = ::gossamer::net::messages;

// ---- Cap'n Proto -> plain ------------------------------------------------------------------

std::string toString(capnp::Text::Reader text) { return std::string(text.begin(), text.size()); }

std::vector<std::byte> toBytes(capnp::Data::Reader data) {
  const auto* begin = reinterpret_cast<const std::byte*>(data.begin());
  return std::vector<std::byte>(begin, begin + data.size());
}

Endpoint toEndpoint(m::Address::Reader r) { return Endpoint{toString(r.getHost()), r.getPort()}; }

template <typename Plain, typename Wire>
Plain toEnum(Wire value, Plain last) {
  const auto raw = static_cast<std::uint16_t>(value);
  if (raw > static_cast<std::uint16_t>(last)) throw Malformed{};
  return static_cast<Plain>(raw);
}

std::vector<MemberUpdate> toUpdates(capnp::List<m::MemberUpdate>::Reader list) {
  std::vector<MemberUpdate> out;
  out.reserve(list.size());  // bounded by the traversal limit, which counted the elements
  for (auto u : list) {
    out.push_back(MemberUpdate{u.getPeerId(), toEndpoint(u.getAddress()), u.getIncarnation(),
                               toEnum(u.getState(), MemberState::left), u.getAccuser(),
                               toBytes(u.getIdentityKey()), u.getDialOutOnly()});
  }
  return out;
}

ModelFingerprint toModel(m::ModelFingerprint::Reader r) {
  return ModelFingerprint{r.getParameters(), toString(r.getDtype()), r.getLayoutHash()};
}

PeerInfo toPeerInfo(m::PeerInfo::Reader r) {
  return PeerInfo{r.getProtocolVersion(), toString(r.getClusterId()),
                  r.getPeerId(),          toEndpoint(r.getListen()),
                  toModel(r.getModel()),  toBytes(r.getIdentityKey())};
}

HandshakeMessage toHandshake(m::Handshake::Reader r) {
  switch (r.which()) {
    case m::Handshake::CLIENT_HELLO: {
      auto h = r.getClientHello();
      return ClientHello{toPeerInfo(h.getInfo()), toBytes(h.getNonce()), h.getChannel()};
    }
    case m::Handshake::SERVER_HELLO: {
      auto h = r.getServerHello();
      return ServerHello{toPeerInfo(h.getInfo()), toBytes(h.getNonce()), toBytes(h.getTag()),
                         toBytes(h.getSignature())};
    }
    case m::Handshake::CLIENT_PROOF:
      return ClientProof{toBytes(r.getClientProof().getTag()),
                         toBytes(r.getClientProof().getSignature())};
    case m::Handshake::ACCEPT:
      return HandshakeAccept{};
    case m::Handshake::REFUSAL: {
      auto f = r.getRefusal();
      return HandshakeRefusal{toEnum(f.getCode(), RefusalCode::identity), toString(f.getReason())};
    }
  }
  throw Malformed{};  // a union member from a newer schema
}

MembershipMessage toMembership(m::Membership::Reader r) {
  switch (r.which()) {
    case m::Membership::JOIN_REQUEST: {
      auto j = r.getJoinRequest();
      return JoinRequest{j.getPeerId(), toEndpoint(j.getAddress()), j.getIncarnation(),
                         j.getDialOutOnly()};
    }
    case m::Membership::JOIN_REPLY: {
      auto j = r.getJoinReply();
      return JoinReply{j.getAccepted(), toString(j.getReason()), toUpdates(j.getMembers()),
                       toString(j.getObserved())};
    }
    case m::Membership::PING: {
      auto p = r.getPing();
      return Ping{p.getSender(), p.getSequence(), toUpdates(p.getUpdates())};
    }
    case m::Membership::PING_REQ: {
      auto p = r.getPingReq();
      return PingReq{p.getSender(), p.getSequence(), p.getTarget(),
                     toEndpoint(p.getTargetAddress()), toUpdates(p.getUpdates())};
    }
    case m::Membership::ACK: {
      auto a = r.getAck();
      return Ack{a.getSender(), a.getSequence(), toUpdates(a.getUpdates())};
    }
    case m::Membership::GOSSIP: {
      auto g = r.getGossip();
      return Gossip{g.getSender(), toUpdates(g.getUpdates())};
    }
    case m::Membership::LEAVE: {
      auto l = r.getLeave();
      return Leave{l.getPeerId(), l.getIncarnation()};
    }
    case m::Membership::PUSH_PULL: {
      auto p = r.getPushPull();
      return PushPull{p.getSender(), p.getReply(), toUpdates(p.getMembers())};
    }
    case m::Membership::REACHABILITY: {
      auto d = r.getReachability();
      return Reachability{d.getSender(), d.getDialable(), toEndpoint(d.getAddress()),
                          toString(d.getObserved())};
    }
    case m::Membership::REVERSE: {
      auto v = r.getReverse();
      return Reverse{v.getRequester(), v.getTarget(), v.getChannel(), v.getForwarded()};
    }
    case m::Membership::PUNCH: {
      auto v = r.getPunch();
      return Punch{v.getRequester(),
                   v.getTarget(),
                   v.getChannel(),
                   toString(v.getRequesterHost()),
                   toString(v.getTargetHost()),
                   v.getFromRendezvous()};
    }
  }
  throw Malformed{};
}

EnvelopeHeader toEnvelope(m::Envelope::Reader r) {
  EnvelopeHeader out;
  out.tag = r.getTag();
  out.kind = r.getKind();
  out.sender = r.getSender();
  out.step = r.getStep();
  auto scalars = r.getScalars();
  auto payloads = r.getPayloads();
  auto integers = r.getIntegers();
  if (scalars.size() > kMaxEnvelopeScalars || payloads.size() > kMaxEnvelopePayloads ||
      integers.size() > kMaxEnvelopeIntegers) {
    throw Malformed{};
  }
  out.scalars.reserve(scalars.size());
  for (double s : scalars) out.scalars.push_back(s);
  out.integers.reserve(integers.size());
  for (std::uint64_t i : integers) out.integers.push_back(i);
  out.route = toEnum(r.getRoute(), Route::runtime);
  out.control = toBytes(r.getControl());
  out.payloads.reserve(payloads.size());
  for (auto p : payloads) {
    PayloadDescriptor d{p.getSize(), toEnum(p.getDtype(), Dtype::i64), p.getElements()};
    if (p.hasEncoding()) {
      const auto e = p.getEncoding();
      d.encoding = PayloadEncoding{toEnum(e.getCodec(), PayloadEncoding::Codec::randk),
                                   e.getBlockSize(), e.getFraction(), e.getSampled()};
    }
    out.payloads.push_back(d);
  }
  return out;
}

Header toHeader(m::Header::Reader r) {
  switch (r.which()) {
    case m::Header::HANDSHAKE:
      return toHandshake(r.getHandshake());
    case m::Header::MEMBERSHIP:
      return toMembership(r.getMembership());
    case m::Header::ENVELOPE:
      return toEnvelope(r.getEnvelope());
    case m::Header::RELAY: {
      auto v = r.getRelay();
      return RelayHeader{v.getStream(),
                         v.getSource(),
                         v.getTarget(),
                         toEnum(v.getKind(), RelayKind::close),
                         toEndpoint(v.getAddress()),
                         toString(v.getReason())};
    }
  }
  throw Malformed{};
}

// ---- plain -> Cap'n Proto ------------------------------------------------------------------

capnp::Text::Reader text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

capnp::Data::Reader data(const std::vector<std::byte>& v) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(v.data()), v.size());
}

void setAddress(m::Address::Builder b, const Endpoint& e) {
  b.setHost(text(e.host));
  b.setPort(e.port);
}

template <typename ListBuilder>
void setUpdates(ListBuilder list, const std::vector<MemberUpdate>& updates) {
  for (unsigned i = 0; i < updates.size(); ++i) {
    auto b = list[i];
    b.setPeerId(updates[i].peerId);
    setAddress(b.initAddress(), updates[i].address);
    b.setIncarnation(updates[i].incarnation);
    b.setState(static_cast<m::MemberState>(updates[i].state));
    b.setAccuser(updates[i].accuser);
    if (!updates[i].identityKey.empty()) b.setIdentityKey(data(updates[i].identityKey));
    b.setDialOutOnly(updates[i].dialOutOnly);
  }
}

void setPeerInfo(m::PeerInfo::Builder b, const PeerInfo& info) {
  b.setProtocolVersion(info.protocolVersion);
  b.setClusterId(text(info.clusterId));
  b.setPeerId(info.peerId);
  setAddress(b.initListen(), info.listen);
  auto model = b.initModel();
  model.setParameters(info.model.parameters);
  model.setDtype(text(info.model.dtype));
  model.setLayoutHash(info.model.layoutHash);
  b.setIdentityKey(data(info.identityKey));
}

// Overload set for std::visit over the plain variants.
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

void setHandshake(m::Handshake::Builder b, const HandshakeMessage& message) {
  std::visit(Overloaded{
                 [&](const ClientHello& h) {
                   auto c = b.initClientHello();
                   setPeerInfo(c.initInfo(), h.info);
                   c.setNonce(data(h.nonce));
                   c.setChannel(h.channel);
                 },
                 [&](const ServerHello& h) {
                   auto s = b.initServerHello();
                   setPeerInfo(s.initInfo(), h.info);
                   s.setNonce(data(h.nonce));
                   s.setTag(data(h.tag));
                   s.setSignature(data(h.signature));
                 },
                 [&](const ClientProof& p) {
                   auto c = b.initClientProof();
                   c.setTag(data(p.tag));
                   c.setSignature(data(p.signature));
                 },
                 [&](const HandshakeAccept&) { b.setAccept(); },
                 [&](const HandshakeRefusal& r) {
                   auto f = b.initRefusal();
                   f.setCode(static_cast<m::RefusalCode>(r.code));
                   f.setReason(text(r.reason));
                 },
             },
             message);
}

void setMembership(m::Membership::Builder b, const MembershipMessage& message) {
  std::visit(Overloaded{
                 [&](const JoinRequest& j) {
                   auto w = b.initJoinRequest();
                   w.setPeerId(j.peerId);
                   setAddress(w.initAddress(), j.address);
                   w.setIncarnation(j.incarnation);
                   w.setDialOutOnly(j.dialOutOnly);
                 },
                 [&](const JoinReply& j) {
                   auto w = b.initJoinReply();
                   w.setAccepted(j.accepted);
                   w.setReason(text(j.reason));
                   setUpdates(w.initMembers(j.members.size()), j.members);
                   w.setObserved(text(j.observed));
                 },
                 [&](const Ping& p) {
                   auto w = b.initPing();
                   w.setSender(p.sender);
                   w.setSequence(p.sequence);
                   setUpdates(w.initUpdates(p.updates.size()), p.updates);
                 },
                 [&](const PingReq& p) {
                   auto w = b.initPingReq();
                   w.setSender(p.sender);
                   w.setSequence(p.sequence);
                   w.setTarget(p.target);
                   setAddress(w.initTargetAddress(), p.targetAddress);
                   setUpdates(w.initUpdates(p.updates.size()), p.updates);
                 },
                 [&](const Ack& a) {
                   auto w = b.initAck();
                   w.setSender(a.sender);
                   w.setSequence(a.sequence);
                   setUpdates(w.initUpdates(a.updates.size()), a.updates);
                 },
                 [&](const Gossip& g) {
                   auto w = b.initGossip();
                   w.setSender(g.sender);
                   setUpdates(w.initUpdates(g.updates.size()), g.updates);
                 },
                 [&](const Leave& l) {
                   auto w = b.initLeave();
                   w.setPeerId(l.peerId);
                   w.setIncarnation(l.incarnation);
                 },
                 [&](const PushPull& p) {
                   auto w = b.initPushPull();
                   w.setSender(p.sender);
                   w.setReply(p.reply);
                   setUpdates(w.initMembers(p.members.size()), p.members);
                 },
                 [&](const Reachability& d) {
                   auto w = b.initReachability();
                   w.setSender(d.sender);
                   w.setDialable(d.dialable);
                   setAddress(w.initAddress(), d.address);
                   w.setObserved(text(d.observed));
                 },
                 [&](const Reverse& r) {
                   auto w = b.initReverse();
                   w.setRequester(r.requester);
                   w.setTarget(r.target);
                   w.setChannel(r.channel);
                   w.setForwarded(r.forwarded);
                 },
                 [&](const Punch& p) {
                   auto w = b.initPunch();
                   w.setRequester(p.requester);
                   w.setTarget(p.target);
                   w.setChannel(p.channel);
                   w.setRequesterHost(text(p.requesterHost));
                   w.setTargetHost(text(p.targetHost));
                   w.setFromRendezvous(p.fromRendezvous);
                 },
             },
             message);
}

void setEnvelope(m::Envelope::Builder b, const EnvelopeHeader& e) {
  b.setTag(e.tag);
  b.setKind(e.kind);
  b.setSender(e.sender);
  b.setStep(e.step);
  auto scalars = b.initScalars(e.scalars.size());
  for (unsigned i = 0; i < e.scalars.size(); ++i) scalars.set(i, e.scalars[i]);
  auto payloads = b.initPayloads(e.payloads.size());
  for (unsigned i = 0; i < e.payloads.size(); ++i) {
    payloads[i].setSize(e.payloads[i].size);
    payloads[i].setDtype(static_cast<m::Dtype>(e.payloads[i].dtype));
    payloads[i].setElements(e.payloads[i].elements);
    const PayloadEncoding& encoding = e.payloads[i].encoding;
    if (encoding.codec != PayloadEncoding::Codec::none) {
      auto b = payloads[i].initEncoding();
      b.setCodec(static_cast<m::PayloadEncoding::Codec>(encoding.codec));
      b.setBlockSize(encoding.blockSize);
      b.setFraction(encoding.fraction);
      b.setSampled(encoding.sampled);
    }
  }
  if (!e.integers.empty()) {
    auto integers = b.initIntegers(e.integers.size());
    for (unsigned i = 0; i < e.integers.size(); ++i) integers.set(i, e.integers[i]);
  }
  b.setRoute(static_cast<m::Route>(e.route));
  if (!e.control.empty()) b.setControl(data(e.control));
}

// A first segment large enough for any handshake or envelope header with a few scalars, so
// that the common headers are one segment.
constexpr unsigned kFirstSegmentWords = 128;

template <typename Alternative>
std::error_code decodeAs(std::span<const std::byte> bytes, Alternative& out) {
  Header header;
  if (auto ec = decodeHeader(bytes, header)) return ec;
  auto* value = std::get_if<Alternative>(&header);
  if (value == nullptr) return Errc::unexpectedMessage;
  out = std::move(*value);
  return {};
}

}  // namespace

std::error_code decodeHeader(std::span<const std::byte> bytes, Header& out) {
  return readFlat<m::Header>(bytes, [&](m::Header::Reader root) { out = toHeader(root); });
}

std::vector<std::byte> encodeHeader(const Header& header) {
  capnp::MallocMessageBuilder builder(kFirstSegmentWords);
  auto root = builder.initRoot<m::Header>();
  std::visit(Overloaded{
                 [&](const HandshakeMessage& h) { setHandshake(root.initHandshake(), h); },
                 [&](const MembershipMessage& h) { setMembership(root.initMembership(), h); },
                 [&](const EnvelopeHeader& h) { setEnvelope(root.initEnvelope(), h); },
                 [&](const RelayHeader& h) {
                   auto w = root.initRelay();
                   w.setStream(h.stream);
                   w.setSource(h.source);
                   w.setTarget(h.target);
                   w.setKind(static_cast<m::RelayKind>(h.kind));
                   setAddress(w.initAddress(), h.address);
                   w.setReason(text(h.reason));
                 },
             },
             header);
  return flatten(builder);
}

std::vector<std::byte> encodeEnvelope(const EnvelopeHeader& envelope) {
  return encodeHeader(Header{envelope});
}

std::error_code decodeEnvelope(std::span<const std::byte> bytes, EnvelopeHeader& out) {
  return decodeAs(bytes, out);
}

std::vector<std::byte> encodeRelay(const RelayHeader& relay) { return encodeHeader(Header{relay}); }

std::vector<std::byte> encodeMembership(const MembershipMessage& message) {
  return encodeHeader(Header{message});
}

std::error_code decodeMembership(std::span<const std::byte> bytes, MembershipMessage& out) {
  return decodeAs(bytes, out);
}

std::vector<std::byte> encodeHandshake(const HandshakeMessage& message) {
  return encodeHeader(Header{message});
}

std::error_code decodeHandshake(std::span<const std::byte> bytes, HandshakeMessage& out) {
  return decodeAs(bytes, out);
}

}  // namespace gossamer::net::wire
