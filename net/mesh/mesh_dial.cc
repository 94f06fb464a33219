// How the mesh opens a link: a dial (connect, then the client handshake) and a hole punch (both
// ends connect; the lead runs the client handshake). mesh_links.h states the contracts.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "net/errors.h"
#include "net/mesh/mesh_links.h"

namespace gossamer::net::detail {
namespace {

std::chrono::milliseconds left(MeshClock::time_point deadline) {
  return std::max(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - MeshClock::now()),
      std::chrono::milliseconds(1));
}

}  // namespace

asio::awaitable<LinkOutcome> dial(Transport& transport, const wire::HandshakeConfig& handshake,
                                  Endpoint to, std::uint8_t channel, MeshClock::time_point deadline,
                                  std::unique_ptr<Link>& link) {
  LinkResult connected = co_await transport.connect(to, left(deadline));
  if (connected.error) co_return LinkOutcome{connected.error, {}, {}};
  link = std::move(connected.link);
  wire::HandshakeConfig config = handshake;
  config.channel = channel;
  config.timeout = left(deadline);
  const wire::HandshakeResult hello = co_await wire::clientHandshake(*link, config);
  if (!hello.ok()) co_return LinkOutcome{hello.error, hello.reason, {}};
  co_return LinkOutcome{
      {}, {}, Remote{hello.remotePeerId, hello.remoteListen, link->remoteAddress()}};
}

asio::awaitable<LinkOutcome> punch(Transport& transport, const wire::HandshakeConfig& handshake,
                                   Endpoint member, std::uint64_t expected, Endpoint at,
                                   Channel channel, bool lead, std::chrono::milliseconds timeout,
                                   std::unique_ptr<Link>& link, wire::HandshakeResult& hello) {
  const MeshClock::time_point deadline = MeshClock::now() + timeout;
  LinkResult punched = co_await transport.punch(at, timeout, !lead);
  if (punched.error) co_return LinkOutcome{punched.error, {}, {}};
  link = std::move(punched.link);
  wire::HandshakeConfig config = handshake;
  config.channel = static_cast<std::uint8_t>(channel);
  config.timeout = left(deadline);
  // (Not a conditional expression: GCC 12 runs both co_awaits of `c ? co_await a : co_await b`.)
  if (lead)
    hello = co_await wire::clientHandshake(*link, config);
  else
    hello = co_await wire::serverHandshake(*link, config);
  LinkOutcome outcome{hello.error, hello.reason,
                      Remote{hello.remotePeerId, hello.remoteListen, link->remoteAddress()}};
  if (hello.ok() && (hello.remotePeerId != expected || hello.remoteListen != member)) {
    outcome.error = make_error_code(Errc::identityMismatch);
    outcome.reason =
        fmt::format("{} answered as {:016x} at {}, not {:016x} at {}", at.str(),
                    hello.remotePeerId, hello.remoteListen.str(), expected, member.str());
  }
  co_return outcome;
}

}  // namespace gossamer::net::detail
