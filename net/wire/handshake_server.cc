#include "net/wire/handshake_server.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::net::wire {
namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::chrono::milliseconds kAcceptErrorPause{100};

// Shared by the accept loop and the handshakes it spawned (which may outlive it). Used on the
// io thread only.
struct Slots {
  explicit Slots(asio::any_io_executor executor) : freed(executor), flushTimer(std::move(executor)) {}
  std::shared_ptr<HandshakeServerStats> stats;
  asio::steady_timer freed;  // cancelled whenever a handshake ends, to wake the accept loop
  std::map<std::string, std::size_t> pendingFrom;  // source address: handshakes running
  RefusalLog refusals;
  asio::steady_timer flushTimer;  // closes the refusal log's windows while the loop runs
  bool stopped = false;

  void refused(Refusal cause, const std::string& source, const std::string& detail) {
    ++stats->refused;
    ++stats->refusedBy[static_cast<std::size_t>(cause)];
    for (const std::string& line :
         refusals.record(cause, source, detail, RefusalLog::Clock::now()))
      log::get("net")->warn("{}", line);
  }
  void ended(const std::string& source) {
    --stats->pending;
    if (auto it = pendingFrom.find(source); it != pendingFrom.end() && --it->second == 0)
      pendingFrom.erase(it);
    freed.cancel();
  }
};

asio::awaitable<void> handshakeOne(std::unique_ptr<Link> link,
                                   std::shared_ptr<const HandshakeConfig> config,
                                   OnAuthenticatedLink onLink, std::shared_ptr<Slots> slots,
                                   std::string source) {
  HandshakeResult hello = co_await serverHandshake(*link, *config);
  slots->ended(source);
  if (!hello.ok()) {  // serverHandshake closed the link
    slots->refused(classify(hello.error, link->bytesReceived()), source, hello.reason);
    co_return;
  }
  ++slots->stats->accepted;
  onLink(AuthenticatedLink{std::move(link), std::move(hello)});
}

// Logs the summary of each refusal window once it ends, until the accept loop stops.
asio::awaitable<void> flushRefusals(std::shared_ptr<Slots> slots) {
  while (!slots->stopped) {
    slots->flushTimer.expires_after(std::chrono::seconds(1));
    co_await slots->flushTimer.async_wait(kUseTuple);
    if (auto summary = slots->refusals.flush(RefusalLog::Clock::now()))
      log::get("net")->warn("{}", *summary);
  }
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

  const std::size_t perSource =
      std::max<std::size_t>(transport.limits().maxPendingHandshakesPerSource, 1);
  asio::co_spawn(executor, flushRefusals(slots), asio::detached);
  struct Stop {
    Slots& slots;
    ~Stop() {
      slots.stopped = true;
      slots.flushTimer.cancel();
    }
  } stop{*slots};

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
    std::string source = sourceOf(inbound.link->remoteAddress());
    std::size_t& fromSource = slots->pendingFrom[source];
    if (fromSource >= perSource) {
      inbound.link->close();
      slots->refused(Refusal::tooManyPending, source,
                     fmt::format("{} already pending", fromSource));
      continue;
    }
    ++fromSource;
    ++counts.pending;
    counts.maxPending = std::max(counts.maxPending, counts.pending);
    asio::co_spawn(executor,
                   handshakeOne(std::move(inbound.link), sharedConfig, onLink, slots,
                                std::move(source)),
                   asio::detached);
  }
}

}  // namespace gossamer::net::wire
