// A real client handshake against a real server handshake over an in-memory link pair
// (tests/net/fake_link.h), for the handshake and identity tests: no transport backend involved.
#pragma once

#include <chrono>
#include <utility>

#include <asio/io_context.hpp>
#include <doctest/doctest.h>

#include "net/wire/handshake.h"
#include "tests/net/fake_link.h"
#include "tests/net/wire_fuzz.h"

namespace gossamer::net::testing {

struct PairOutcome {
  detail::Outcome client;
  detail::Outcome server;
};

// Runs both sides to their end, with a 10 s watchdog; each side's frames may pass a filter first
// (a man in the middle). Neither side may throw.
inline PairOutcome runPair(const wire::HandshakeConfig& clientConfig,
                           const wire::HandshakeConfig& serverConfig,
                           FakeLink::SendFilter serverFilter = {},
                           FakeLink::SendFilter clientFilter = {}) {
  asio::io_context io;
  auto [clientEnd, serverEnd] = FakeLink::pair(io);
  if (serverFilter) serverEnd->setSendFilter(std::move(serverFilter));
  if (clientFilter) clientEnd->setSendFilter(std::move(clientFilter));
  PairOutcome out;
  detail::start(io, *clientEnd, clientConfig, true, out.client);
  detail::start(io, *serverEnd, serverConfig, false, out.server);
  io.run_for(std::chrono::seconds(10));
  REQUIRE(out.client.done);
  REQUIRE(out.server.done);
  REQUIRE(out.client.exception.empty());
  REQUIRE(out.server.exception.empty());
  return out;
}

}  // namespace gossamer::net::testing
