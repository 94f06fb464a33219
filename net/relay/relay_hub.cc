#include "net/relay/relay_hub.h"

#include <algorithm>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>
#include <fmt/format.h>

#include "engine/base/log.h"
#include "net/errors.h"
#include "net/link_support.h"

namespace gossamer::net::relay {
namespace {

using Clock = std::chrono::steady_clock;
using wire::RelayHeader;
using wire::RelayKind;

// A Relay frame (built field by field: GCC 12 warns about braced Endpoint members).
RelayHeader frameOf(RelayKind kind, std::uint64_t stream, std::uint64_t source,
                    std::uint64_t target, std::string reason = {}) {
  RelayHeader frame;
  frame.stream = stream;
  frame.source = source;
  frame.target = target;
  frame.kind = kind;
  frame.reason = std::move(reason);
  return frame;
}

// One chunk of a stream to its relay (a free coroutine: it owns everything it uses).
asio::awaitable<std::error_code> sendChunk(RelayHost& host, std::shared_ptr<bool> alive,
                                           Endpoint via, RelayHeader header,
                                           std::vector<std::byte> chunk) {
  if (!*alive) co_return asio::error::operation_aborted;
  co_return co_await host.sendTo(std::move(via), wire::encodeRelay(header), chunk);
}

// A frame on an open link (co_spawned: the host may be gone by the time it starts).
asio::awaitable<void> postOnLink(RelayHost& host, std::shared_ptr<bool> alive, Endpoint at,
                                 std::uint64_t peer, RelayHeader frame) {
  if (!*alive) co_return;
  co_await host.sendOnLink(std::move(at), peer, wire::encodeRelay(frame), {}, false);
}

}  // namespace

RelayHub::RelayHub(asio::io_context& io, RelayHost& host, RelayOptions options)
    : io_(io),
      host_(host),
      options_(options),
      rng_(std::random_device{}()),
      alive_(std::make_shared<bool>(true)) {}

RelayHub::~RelayHub() {
  *alive_ = false;
  close();
}

void RelayHub::close() {
  forwards_.clear();
  for (auto& [key, end] : std::exchange(ends_, {}))
    end.stream->fail(asio::error::operation_aborted);
}

std::shared_ptr<RelayedStream> RelayHub::makeStream(const wire::HandshakeConfig& handshake,
                                                    bool client, const Key& key, Endpoint via,
                                                    const wire::IdentityKey& expected,
                                                    std::uint64_t peer) {
  RelayedStreamOptions o;
  o.client = client;
  o.self = handshake.identity;
  o.expected = expected;
  o.remote = "relayed by " + via.str();
  const RelayHeader data =
      frameOf(RelayKind::data, key.second, key.first, client ? peer : handshake.peerId);
  o.sender = [&host = host_, alive = alive_, via, data](std::vector<std::byte> chunk) {
    return sendChunk(host, alive, via, data, std::move(chunk));
  };
  // An end that closes (or fails) tells the relay; one the relay closed is gone from ends_.
  o.onClosed = [this, alive = alive_, key](std::error_code ec) {
    if (!*alive) return;
    const auto it = ends_.find(key);
    if (it == ends_.end()) return;
    const End end = std::move(it->second);
    ends_.erase(it);
    postTo(end.via, frameOf(RelayKind::close, key.second, key.first, 0, ec.message()));
  };
  return RelayedStream::make(io_.get_executor(), std::move(o));
}

asio::awaitable<RelayedLinkResult> RelayHub::open(const wire::HandshakeConfig& handshake,
                                                  Endpoint via, Endpoint member,
                                                  std::uint64_t expected, Channel channel,
                                                  std::chrono::milliseconds timeout) {
  RelayedLinkResult result;
  const std::optional<wire::IdentityKey> key =
      handshake.book ? handshake.book->keyOf(expected) : std::nullopt;
  if (!key) {
    result.outcome.error = make_error_code(Errc::identityMismatch);
    result.outcome.reason = fmt::format("no identity key is bound to {:016x} yet", expected);
    co_return result;
  }
  const std::shared_ptr<bool> alive = alive_;
  const Key streamKey{handshake.peerId, rng_()};
  const auto why = std::make_shared<std::string>();
  std::shared_ptr<RelayedStream> stream =
      makeStream(handshake, true, streamKey, via, *key, expected);
  ends_[streamKey] = End{stream, via, why};
  RelayHeader opening = frameOf(RelayKind::open, streamKey.second, streamKey.first, expected);
  opening.address = member;
  const std::error_code sent = co_await host_.sendTo(via, wire::encodeRelay(opening), {});
  if (!*alive) {
    result.outcome.error = asio::error::operation_aborted;
    co_return result;
  }
  if (sent) {
    stream->fail(sent);
    result.outcome = LinkOutcome{sent, fmt::format("the relay {} was not reached", via.str()), {}};
    co_return result;
  }
  stream->start();
  std::unique_ptr<Link> link = stream->link();
  wire::HandshakeConfig config = handshake;
  config.channel = static_cast<std::uint8_t>(channel);
  config.timeout = timeout;
  const wire::HandshakeResult hello = co_await wire::clientHandshake(*link, config);
  if (!*alive) {
    result.outcome.error = asio::error::operation_aborted;
    co_return result;
  }
  result.outcome =
      LinkOutcome{hello.error, hello.reason,
                  Remote{hello.remotePeerId, hello.remoteListen, link->remoteAddress()}};
  if (!why->empty()) {  // the relay (or the target) ended the stream, and said why
    result.outcome.error = asio::error::connection_refused;
    result.outcome.reason = *why;
  } else if (!hello.ok() && !stream->tlsReason().empty()) {
    result.outcome.reason = stream->tlsReason();
  } else if (hello.ok() && (hello.remotePeerId != expected || hello.remoteListen != member)) {
    result.outcome.error = make_error_code(Errc::identityMismatch);
    result.outcome.reason =
        fmt::format("{:016x} at {} answered through {}, not {:016x} at {}", hello.remotePeerId,
                    hello.remoteListen.str(), via.str(), expected, member.str());
  }
  if (result.outcome.ok())
    result.link = std::move(link);
  else
    link->close();
  co_return result;
}

asio::awaitable<void> RelayHub::onFrame(const wire::HandshakeConfig& handshake, const Remote& from,
                                        RelayHeader frame, std::span<const std::byte> payload) {
  const Key key{frame.source, frame.stream};
  if (frame.kind == RelayKind::open) {
    if (frame.target == handshake.peerId)
      acceptStream(handshake, from, frame);
    else
      co_await relayOpen(from, frame);
    co_return;
  }
  if (const auto it = ends_.find(key); it != ends_.end() && it->second.via == from.listen) {
    const std::shared_ptr<RelayedStream> stream = it->second.stream;
    if (frame.kind == RelayKind::data) {
      log::get("net")->trace("relayed stream {:016x}/{:x}: {} bytes from {}", frame.source,
                             frame.stream, payload.size(), from.listen.str());
      co_await stream->deliver(payload);
    } else {  // closed by the other end or the relay: no close goes back
      *it->second.why = frame.reason.empty() ? "the relayed stream was closed" : frame.reason;
      ends_.erase(it);
      stream->fail(asio::error::connection_reset);
    }
    co_return;
  }
  co_await relayOnward(from, frame, payload);
}

asio::awaitable<void> RelayHub::relayOpen(const Remote& from, const RelayHeader& frame) {
  auto logger = log::get("net");
  const Key key{frame.source, frame.stream};
  if (from.peerId != frame.source) {
    logger->warn("refused to relay a stream for {:016x}: it was asked by {:016x} ({})",
                 frame.source, from.peerId, from.listen.str());
    co_return;
  }
  if (forwards_.count(key)) co_return;
  RelayHeader refusal = frameOf(RelayKind::close, frame.stream, frame.source, frame.target);
  if (!options_.enabled)
    refusal.reason = "this member does not relay (--relay off)";
  else if (forwards_.size() >= options_.maxStreams)
    refusal.reason = fmt::format("this member relays {} streams already", forwards_.size());
  if (!refusal.reason.empty()) {
    co_await host_.sendOnLink(from.listen, from.peerId, wire::encodeRelay(refusal), {}, false);
    co_return;
  }
  forwards_[key] = Forward{from.listen, frame.address, frame.target};
  RelayHeader onward = frame;
  onward.address = from.listen;
  const std::shared_ptr<bool> alive = alive_;
  const std::error_code ec =
      co_await host_.sendOnLink(frame.address, frame.target, wire::encodeRelay(onward), {}, true);
  if (!*alive) co_return;
  if (ec) {
    forwards_.erase(key);
    refusal.reason =
        fmt::format("the relay could not reach {:016x}: {}", frame.target, ec.message());
    co_await host_.sendOnLink(from.listen, from.peerId, wire::encodeRelay(refusal), {}, false);
    co_return;
  }
  ++streamsRelayed_;
  logger->info("relaying a stream from {:016x} to {:016x} (both dial-out only)", frame.source,
               frame.target);
}

asio::awaitable<void> RelayHub::relayOnward(const Remote& from, const RelayHeader& frame,
                                            std::span<const std::byte> payload) {
  const Key key{frame.source, frame.stream};
  const auto it = forwards_.find(key);
  if (it == forwards_.end()) {  // ended already: the rest of it is dropped
    log::get("net")->debug(
        "dropped a relay frame of stream {:016x}/{:x} from {:016x}: no such stream", frame.source,
        frame.stream, from.peerId);
    co_return;
  }
  const Forward forward = it->second;
  const bool fromSource = from.peerId == frame.source && from.listen == forward.sourceAt;
  const bool fromTarget = from.peerId == forward.target && from.listen == forward.targetAt;
  if (!fromSource && !fromTarget) {  // not one of the two ends: never forwarded
    log::get("net")->debug(
        "dropped a relay frame of stream {:016x}/{:x} from {:016x} at {}: not an end", frame.source,
        frame.stream, from.peerId, from.listen.str());
    co_return;
  }
  const Endpoint to = fromSource ? forward.targetAt : forward.sourceAt;
  const std::uint64_t peer = fromSource ? forward.target : frame.source;
  RelayHeader onward = frame;
  onward.target = forward.target;
  if (frame.kind == RelayKind::close) {
    forwards_.erase(it);
    co_await host_.sendOnLink(to, peer, wire::encodeRelay(onward), {}, false);
    co_return;
  }
  const std::shared_ptr<bool> alive = alive_;
  co_await pace(payload.size());
  if (!*alive) co_return;
  const std::error_code ec =
      co_await host_.sendOnLink(to, peer, wire::encodeRelay(onward), payload, false);
  if (!*alive) co_return;
  if (!ec) {
    bytesRelayed_ += payload.size();
    co_return;
  }
  // The stream cannot go on: both ends hear of it.
  if (forwards_.erase(key) == 0) co_return;
  const RelayHeader closing = frameOf(RelayKind::close, frame.stream, frame.source, forward.target,
                                      fmt::format("the relay lost its link to {:016x}", peer));
  post(forward.sourceAt, frame.source, closing);
  post(forward.targetAt, forward.target, closing);
}

void RelayHub::acceptStream(const wire::HandshakeConfig& handshake, const Remote& from,
                            const RelayHeader& frame) {
  const Key key{frame.source, frame.stream};
  if (ends_.count(key)) return;
  const std::optional<wire::IdentityKey> expected =
      handshake.book ? handshake.book->keyOf(frame.source) : std::nullopt;
  if (!expected) {
    postTo(from.listen, frameOf(RelayKind::close, frame.stream, frame.source, frame.target,
                                "the target knows no identity key of the source"));
    return;
  }
  std::shared_ptr<RelayedStream> stream =
      makeStream(handshake, false, key, from.listen, *expected, frame.source);
  ends_[key] = End{stream, from.listen, std::make_shared<std::string>()};
  wire::HandshakeConfig config = handshake;
  asio::co_spawn(
      io_,
      [this, alive = alive_, stream, config, from, frame]() -> asio::awaitable<void> {
        std::unique_ptr<Link> link = stream->link();
        const wire::HandshakeResult hello = co_await wire::serverHandshake(*link, config);
        if (!*alive) co_return;
        if (hello.ok() && hello.remotePeerId == frame.source &&
            hello.remoteListen == frame.address) {
          host_.adopt(wire::AuthenticatedLink{std::move(link), hello}, from.listen);
          co_return;
        }
        link->close();
        std::string why = hello.ok() ? fmt::format("it answered as {:016x} at {}",
                                                   hello.remotePeerId, hello.remoteListen.str())
                                     : hello.error.message();
        if (!stream->tlsReason().empty()) why += ": " + stream->tlsReason();
        log::get("net")->warn(
            "refused a link relayed by {:016x} ({}) that claims to come from {:016x} at {}: {}",
            from.peerId, from.listen.str(), frame.source, frame.address.str(), why);
      },
      asio::detached);
}

void RelayHub::linkLost(std::uint64_t peer, const Endpoint& at) {
  // The close frames go out once the tables are settled: a post may run at once (co_spawn from
  // the io thread), fail on a link that is gone too, and bring this function back in.
  struct Closing {
    Endpoint at;
    std::uint64_t peer;
    RelayHeader frame;
  };
  std::vector<Closing> closing;
  for (auto it = forwards_.begin(); it != forwards_.end();) {
    const auto& [key, forward] = *it;
    const bool source = key.first == peer && forward.sourceAt == at;
    const bool target = forward.target == peer && forward.targetAt == at;
    if (!source && !target) {
      ++it;
      continue;
    }
    RelayHeader frame = frameOf(RelayKind::close, key.second, key.first, forward.target,
                                fmt::format("the relay lost its link to {:016x}", peer));
    if (source)
      closing.push_back({forward.targetAt, forward.target, std::move(frame)});
    else
      closing.push_back({forward.sourceAt, key.first, std::move(frame)});
    it = forwards_.erase(it);
  }
  std::vector<std::shared_ptr<RelayedStream>> lost;
  for (auto it = ends_.begin(); it != ends_.end();) {
    if (it->second.via != at) {
      ++it;
      continue;
    }
    *it->second.why = fmt::format("the link to the relay {} broke", at.str());
    lost.push_back(it->second.stream);
    it = ends_.erase(it);
  }
  for (const auto& stream : lost) stream->fail(asio::error::connection_reset);
  for (Closing& c : closing) post(std::move(c.at), c.peer, c.frame);
}

void RelayHub::post(Endpoint at, std::uint64_t peer, const RelayHeader& frame) {
  asio::co_spawn(io_, postOnLink(host_, alive_, std::move(at), peer, frame), asio::detached);
}

void RelayHub::postTo(Endpoint via, const RelayHeader& frame) {
  asio::co_spawn(io_, sendChunk(host_, alive_, std::move(via), frame, {}), asio::detached);
}

asio::awaitable<void> RelayHub::pace(std::size_t bytes) {
  if (options_.budgetBytesPerSecond <= 0) co_return;
  const Clock::time_point now = Clock::now();
  const Clock::time_point start = std::max(now, budgetFreeAt_);
  budgetFreeAt_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                              static_cast<double>(bytes) / options_.budgetBytesPerSecond));
  if (start <= now) co_return;
  asio::steady_timer wait(io_, start);
  co_await wait.async_wait(net::detail::kUseTuple);
}

}  // namespace gossamer::net::relay
