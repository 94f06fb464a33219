#include "net/wire/handshake_server.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::net::wire {
namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::chrono::milliseconds kAcceptErrorPause{100};

// Shared by the accept loop and the handshakes it spawned (which may outlive it). Used on the
// io thread only.
struct Slots {
  explicit Slots(asio::any_io_executor executor) : freed(std::move(executor)) {}
  std::shared_ptr<HandshakeServerStats> stats;
  asio::steady_timer freed;  // cancelled whenever a handshake ends, to wake the accept loop
};

asio::awaitable<void> handshakeOne(std::unique_ptr<Link> link,
                                   std::shared_ptr<const HandshakeConfig> config,
                                   OnAuthenticatedLink onLink, std::shared_ptr<Slots> slots) {
  HandshakeResult hello = co_await serverHandshake(*link, *config);
  HandshakeServerStats& stats = *slots->stats;
  --stats.pending;
  slots->freed.cancel();
  if (!hello.ok()) {
    ++stats.refused;  // serverHandshake logged why and closed the link
    co_return;
  }
  ++stats.accepted;
  onLink(AuthenticatedLink{std::move(link), std::move(hello)});
}

}  // namespace

asio::awaitable<void> serveHandshakes(Transport& transport, HandshakeConfig config,
                                      OnAuthenticatedLink onLink,
                                      std::shared_ptr<HandshakeServerStats> stats) {
  // serverHandshake throws on these; better here than out of a detached coroutine.
  GOSSAMER_ENFORCE(!config.secret.empty(), "serveHandshakes needs a cluster secret");
  GOSSAMER_ENFORCE(config.timeout.count() > 0, "serveHandshakes needs a positive timeout");
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  auto slots = std::make_shared<Slots>(executor);
  slots->stats = stats ? std::move(stats) : std::make_shared<HandshakeServerStats>();
  HandshakeServerStats& counts = *slots->stats;
  const std::size_t bound = std::max<std::size_t>(transport.limits().maxPendingHandshakes, 1);
  // Owned here and by every handshake, which copies the pointer, not the secret.
  const auto sharedConfig = std::make_shared<const HandshakeConfig>(std::move(config));

  for (;;) {
    while (counts.pending >= bound) {
      slots->freed.expires_at(asio::steady_timer::time_point::max());
      co_await slots->freed.async_wait(kUseTuple);  // woken by cancel() when one ends
    }
    LinkResult inbound = co_await transport.accept();
    if (inbound.error == asio::error::operation_aborted) co_return;
    if (inbound.error) {
      log::get("net")->warn("accept on {} failed: {}; retrying", transport.localEndpoint().str(),
                            inbound.error.message());
      asio::steady_timer pause(executor, kAcceptErrorPause);
      co_await pause.async_wait(kUseTuple);
      continue;
    }
    ++counts.pending;
    counts.maxPending = std::max(counts.maxPending, counts.pending);
    asio::co_spawn(executor, handshakeOne(std::move(inbound.link), sharedConfig, onLink, slots),
                   asio::detached);
  }
}

}  // namespace gossamer::net::wire
