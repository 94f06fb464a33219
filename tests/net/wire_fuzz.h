// The bodies of the wire fuzz targets, shared by tests/fuzz/fuzz_*.cc (libFuzzer) and
// tests/net/fuzz_corpus_replay_test.cc (doctest, default build). Each returns an empty string,
// or a description of the property the input broke (the fuzz targets abort on it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "engine/base/log.h"
#include "net/errors.h"
#include "net/wire/codec.h"
#include "net/wire/handshake.h"
#include "tests/net/fake_link.h"

namespace gossamer::net::testing {

// Reads the fuzz input front to back; past the end everything reads as zero / empty.
class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return position_ >= size_; }
  std::size_t remaining() const { return empty() ? 0 : size_ - position_; }
  std::uint8_t u8() { return empty() ? 0 : data_[position_++]; }
  std::uint16_t u16() {
    const std::uint16_t low = u8();
    return static_cast<std::uint16_t>(low | (u8() << 8));
  }
  std::vector<std::byte> take(std::size_t count) {
    count = std::min(count, remaining());
    const auto* begin = reinterpret_cast<const std::byte*>(data_ + position_);
    position_ += count;
    return std::vector<std::byte>(begin, begin + count);
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

// Frame decoder: any input decodes or is refused with malformedMessage, never crashes; what
// decodes re-encodes to bytes that decode to the same header, and the typed shorthands agree.
inline std::string fuzzFrameDecoder(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  wire::Header header;
  const std::error_code ec = wire::decodeHeader(bytes, header);
  wire::EnvelopeHeader envelope;
  const std::error_code envelopeEc = wire::decodeEnvelope(bytes, envelope);
  if (ec) {
    if (ec != Errc::malformedMessage) return "decodeHeader failed with " + ec.message();
    if (envelopeEc != Errc::malformedMessage) return "decodeEnvelope disagrees on a bad header";
    return {};
  }
  if (std::holds_alternative<wire::EnvelopeHeader>(header) != !envelopeEc) {
    return "decodeEnvelope disagrees with decodeHeader on the kind";
  }
  const std::vector<std::byte> encoded = wire::encodeHeader(header);
  wire::Header again;
  if (wire::decodeHeader(encoded, again)) return "a re-encoded header does not decode";
  if (wire::encodeHeader(again) != encoded) return "re-encoding is not stable";
  return {};
}

namespace detail {

// Silences the "net" logger (every refused handshake logs a warning) for one fuzz input.
class QuietNetLog {
 public:
  QuietNetLog() : logger_(log::get("net")), level_(logger_->level()) {
    logger_->set_level(spdlog::level::off);
  }
  ~QuietNetLog() { logger_->set_level(level_); }
  QuietNetLog(const QuietNetLog&) = delete;
  QuietNetLog& operator=(const QuietNetLog&) = delete;

 private:
  std::shared_ptr<spdlog::logger> logger_;
  spdlog::level::level_enum level_;
};

struct Outcome {
  bool done = false;
  std::string exception;
  wire::HandshakeResult result;
};

inline void start(asio::io_context& io, Link& link, const wire::HandshakeConfig& config,
                  bool client, Outcome& outcome) {
  auto handshake =
      client ? wire::clientHandshake(link, config) : wire::serverHandshake(link, config);
  asio::co_spawn(io, std::move(handshake),
                 [&outcome](std::exception_ptr error, wire::HandshakeResult result) {
                   outcome.done = true;
                   outcome.result = std::move(result);
                   if (error) {
                     try {
                       std::rethrow_exception(error);
                     } catch (const std::exception& e) {
                       outcome.exception = e.what();
                     } catch (...) {
                       outcome.exception = "unknown exception";
                     }
                   }
                 });
}

inline wire::HandshakeConfig fuzzConfig(std::uint64_t peerId) {
  wire::HandshakeConfig config;
  config.clusterId = "fuzz";
  config.peerId = peerId;
  config.listen = Endpoint{"127.0.0.1", static_cast<std::uint16_t>(7000 + peerId)};
  config.model = wire::ModelFingerprint{101770, "f32", 0x1234abcd};
  const std::string secret = "fuzz cluster secret";
  config.secret.assign(reinterpret_cast<const std::byte*>(secret.data()),
                       reinterpret_cast<const std::byte*>(secret.data()) + secret.size());
  // One key pair per peer id for the whole process: the fuzzer's inputs stay cheap to run.
  static const std::shared_ptr<const wire::Identity> identities[] = {wire::Identity::generate(),
                                                                     wire::Identity::generate()};
  config.identity = identities[peerId % 2];
  config.timeout = std::chrono::milliseconds(2000);
  return config;
}

inline std::string checkFinished(const Outcome& outcome, const char* side) {
  if (!outcome.done) return std::string(side) + " handshake did not complete";
  if (!outcome.exception.empty())
    return std::string(side) + " handshake threw: " + outcome.exception;
  if (outcome.result.error == Errc::handshakeTimeout) {
    return std::string(side) + " handshake stalled until its deadline";
  }
  return {};
}

// What a successful side reports about its remote must be the remote's real configuration.
inline bool reportsRemote(const wire::HandshakeResult& result,
                          const wire::HandshakeConfig& remote) {
  return result.remotePeerId == remote.peerId && result.remoteListen == remote.listen &&
         result.remoteProtocolVersion == remote.protocolVersion &&
         result.remoteModel == remote.model &&
         result.remoteIdentity == remote.identity->publicKey();
}

}  // namespace detail

// Handshake. Input byte 0 picks the scenario:
//   bit 1 clear: "raw": the rest is the remote's frames ([u16 length | 0x8000 if a payload
//     follows][header][u8 length][payload]...), fed to the server side (bit 0 clear) or the
//     client side (bit 0 set) of a handshake; the remote then half-closes. Such a handshake
//     must end (never stall, never throw) and never succeed: the fuzzer cannot forge a tag.
//   bit 1 set: "man in the middle": a real client and a real server run against each other,
//     the server's config differing by bits 2-7 (secret, version, cluster, parameters, layout
//     hash, an id the client knows by another identity key); every frame in either direction
//     first consumes an op from the rest of the input (pass, flip a byte, truncate, replace, add
//     a payload, drop and disconnect). Both sides must
//     end; incompatible peers never succeed; a side that succeeds reports the remote's real
//     identity; with no op applied, compatible peers both succeed and incompatible ones both
//     fail with the error that names the difference.
inline std::string fuzzHandshake(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return {};
  detail::QuietNetLog quiet;
  const std::uint8_t scenario = data[0];
  FuzzInput in(data + 1, size - 1);
  asio::io_context io;
  auto [clientEnd, serverEnd] = FakeLink::pair(io);

  if ((scenario & 2) == 0) {
    const bool testClient = (scenario & 1) != 0;
    FakeLink& tested = testClient ? *clientEnd : *serverEnd;
    while (in.remaining() >= 2) {
      const std::uint16_t word = in.u16();
      FakeFrame frame{in.take(word & 0x7fff), {}};
      if ((word & 0x8000) != 0) frame.payloads.push_back(in.take(in.u8()));
      tested.inject(std::move(frame));
    }
    tested.peerFinishedSending();
    detail::Outcome outcome;
    detail::start(io, tested, detail::fuzzConfig(1), testClient, outcome);
    io.run();
    if (auto problem = detail::checkFinished(outcome, testClient ? "client" : "server");
        !problem.empty()) {
      return problem;
    }
    if (outcome.result.ok()) return "a handshake against fuzzer frames succeeded";
    return {};
  }

  wire::HandshakeConfig clientConfig = detail::fuzzConfig(1);
  wire::HandshakeConfig serverConfig = detail::fuzzConfig(2);
  Errc expected = Errc::authenticationFailed;  // when the configs differ and nothing is mutated
  bool compatible = true;
  const auto differ = [&](int bit, Errc error) {
    if ((scenario & (1 << bit)) == 0) return false;
    if (compatible) expected = error;  // the first difference checked wins
    compatible = false;
    return true;
  };
  // The version is compared first (before the secret): a peer of another version may not even
  // compute the same transcript.
  if (differ(3, Errc::versionMismatch)) serverConfig.protocolVersion += 1;
  if (differ(2, Errc::authenticationFailed)) serverConfig.secret.push_back(std::byte{'!'});
  if (differ(4, Errc::clusterMismatch)) serverConfig.clusterId = "other";
  if (differ(5, Errc::modelMismatch)) serverConfig.model.parameters = 235146;
  if (differ(6, Errc::modelMismatch)) serverConfig.model.layoutHash ^= 1;
  if (differ(7, Errc::identityMismatch)) {  // the client knows the server's id by another key
    clientConfig.book = std::make_shared<wire::IdentityBook>();
    clientConfig.book->bind(serverConfig.peerId, detail::fuzzConfig(1).identity->publicKey());
  }

  bool mutated = false;
  const auto mitm = [&in, &mutated](FakeFrame& frame) {
    if (in.empty()) return true;
    switch (in.u8() % 8) {
      case 3:
        if (!frame.header.empty()) {
          frame.header[in.u16() % frame.header.size()] ^= std::byte{in.u8()};
          mutated = true;
        }
        return true;
      case 4:
        frame.header.resize(in.u16() % (frame.header.size() + 1));
        mutated = true;
        return true;
      case 5:
        frame.header = in.take(in.u8());
        mutated = true;
        return true;
      case 6:
        frame.payloads.push_back(in.take(in.u8()));
        mutated = true;
        return true;
      case 7:
        mutated = true;
        return false;
      default:
        return true;
    }
  };
  clientEnd->setSendFilter(mitm);
  serverEnd->setSendFilter(mitm);
  detail::Outcome client;
  detail::Outcome server;
  detail::start(io, *clientEnd, clientConfig, true, client);
  detail::start(io, *serverEnd, serverConfig, false, server);
  io.run();
  for (auto problem :
       {detail::checkFinished(client, "client"), detail::checkFinished(server, "server")}) {
    if (!problem.empty()) return problem;
  }
  if (!compatible && (client.result.ok() || server.result.ok())) {
    return "incompatible peers completed a handshake";
  }
  if (client.result.ok() && !detail::reportsRemote(client.result, serverConfig)) {
    return "the client accepted a server identity that is not the server's";
  }
  if (server.result.ok() && !detail::reportsRemote(server.result, clientConfig)) {
    return "the server accepted a client identity that is not the client's";
  }
  if (!mutated && compatible && !(client.result.ok() && server.result.ok())) {
    return "compatible peers failed an untouched handshake: " + client.result.reason + " / " +
           server.result.reason;
  }
  if (!mutated && !compatible &&
      (client.result.error != expected || server.result.error != expected)) {
    return "incompatible peers failed with the wrong error: " + client.result.reason + " / " +
           server.result.reason;
  }
  return {};
}

}  // namespace gossamer::net::testing
