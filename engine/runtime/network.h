// The network side of one peer: its io thread, and on it the transport (optionally inside the
// emulated network of net/shaped), the mesh of authenticated links and the membership service;
// and the membership view as any thread may read it.
//
// Threading: start() and stop() from a thread other than the io thread (they wait for it). The
// handlers given to start() run on the io thread. view(), members(), isMember(), addressOf(),
// epoch() and traffic() are thread-safe; send() is an io-thread coroutine.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <system_error>
#include <thread>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "engine/algorithm.h"
#include "engine/runtime/config.h"
#include "net/membership/membership.h"
#include "net/mesh/mesh.h"

namespace gossamer::engine::runtime {

// Completes `n` from the registry: the transport's default listen endpoint when none is set, and
// its maker (options parsed: a bad one throws gossamer::Error) when none is given.
void prepareTransport(NetworkConfig& n, const Registry& registry);

// The TLS context `n.security` asks for (null for plaintext): a key derived from `n.secret`, or
// `n.tlsCert`/`tlsKey`/`tlsCa`. Throws gossamer::Error naming a certificate file that cannot be
// used.
std::shared_ptr<net::tcp::TlsContext> tlsContext(const NetworkConfig& n);

// One line for the start-up log: how links are secured (never any key material).
std::string describeSecurity(const NetworkConfig& n);

class PeerNetwork {
 public:
  // What the peer does with the network's events (io thread).
  struct Handlers {
    net::EnvelopeTarget target;  // where an envelope's payloads land
    net::EnvelopeHandler envelope;
    std::function<void(const net::membership::Event&)> membershipChanged;  // after the view
    std::function<void(net::Transport&)> registerMemory;                   // once, before listening
    net::DeviceMemory deviceMemory;  // where payloads may live besides the host (a CUDA peer's)
  };

  // `config.transportMaker` must be set (Peer prepares it from the registry).
  PeerNetwork(NetworkConfig config, PeerId self);
  // shutdown().
  ~PeerNetwork();
  PeerNetwork(const PeerNetwork&) = delete;
  PeerNetwork& operator=(const PeerNetwork&) = delete;

  // Starts the io thread, makes the transport, listens and starts joining by the seeds, as a peer
  // of the model `model` (peers of other models are refused) whose run is seeded by `seed`.
  // Throws gossamer::Error when the transport cannot be made or cannot listen (the io thread is
  // then stopped again).
  void start(Handlers handlers, net::wire::ModelFingerprint model, std::uint64_t seed);
  // Leaves the cluster gracefully (members record `left`) when `graceful`, then closes every
  // link; later sends fail. Idempotent; the first call decides.
  void stop(bool graceful);
  // Stops (as a crash would, if stop() was not called), destroys the transport, the mesh and the
  // membership service, and joins the io thread: after it no handler runs. Idempotent.
  void shutdown();

  asio::io_context& io() { return io_; }
  PeerId self() const { return self_; }
  net::Endpoint endpoint() const { return endpoint_; }

  // Any thread. The view as of the last membership event (its epoch's members).
  net::membership::View view() const;
  // The membership's records as they are now, between events too (a member's reachability,
  // Member::dialOutOnly, changes without an event); empty before start() and after stop. Not
  // from the io thread.
  net::membership::View currentRecords();
  std::vector<PeerId> members() const;  // the view's ids, sorted
  bool isMember(PeerId peer) const;
  std::uint64_t epoch() const { return epoch_; }
  // Whether the membership admitted this peer, or it started the cluster (no seeds): true from
  // its own `joined` event on, never false again (losing the cluster later does not undo it).
  bool joined() const { return joined_; }
  // This life's incarnation when the membership admitted it (its own `joined` event); 0 before.
  std::uint64_t life() const { return life_; }
  // Where `peer` listens: its member address, or for a peer that wrote to us before its
  // membership reached us, the address it authenticated with (a reply must still find it).
  std::optional<net::Endpoint> addressOf(PeerId peer) const;
  // The paths to the members the membership service measured (tcp_streams.h, estimatePath).
  // Waits for the io thread.
  std::map<PeerId, PathEstimate> measuredPaths();
  net::TrafficCounters traffic(net::Traffic kind) const;
  // Links that dial-out-only members opened at this peer's request (net::Mesh::linksReversed);
  // 0 once shut down.
  std::uint64_t linksReversed() const;
  // Not the io thread (it waits for it): each seed with its last failed join attempt
  // (net::membership::Service::seedFailures); empty before start().
  std::vector<net::membership::SeedFailure> seedFailures();

  // Io thread: sends an encoded envelope to the peer listening at `to`, in the order of the calls.
  // Without an open link, the sends to `to` queue for one attempt to open it (which holds none of
  // their bytes) and all fail as soon as the failure detector suspects the member there
  // (host_unreachable): connecting to a dead peer retries its closed port for connectTimeout, and
  // the sends to it, each holding a send slot meanwhile, would take every slot of this peer. At
  // most config.linkWaitLimit sends wait again for a link that was open before and broke; a send
  // beyond them fails at once (no_buffer_space). The first opening of a link has no limit: a
  // burst of first sends all go. A send on a link that
  // breaks fails (the next send opens a new one).
  asio::awaitable<std::error_code> send(net::Endpoint to, net::Channel channel,
                                        std::shared_ptr<const net::EncodedEnvelope> envelope,
                                        std::vector<std::span<const std::byte>> payloads);

 private:
  std::unique_ptr<net::Transport> makeTransport(const Handlers& handlers, std::uint64_t seed);
  // Io thread: whether the member listening at `address` is suspected (or confirmed) failed.
  bool suspected(const net::Endpoint& address) const;
  // Io thread: the queue of the sends waiting for this peer's own link to `to` for a channel
  // (see send()): an attempt to open it, the sends in their order, released one after the other
  // once it is open (each as the one before it starts sending), or failed together.
  using LinkKey = std::pair<net::Endpoint, net::Channel>;
  struct LinkWaiter {
    explicit LinkWaiter(asio::io_context& io) : resume(io, Clock::time_point::max()) {}
    asio::steady_timer resume;  // cancelled to resume the send (once it waits)
    bool released = false;      // set before the cancel: a send released before it waits goes on
    std::error_code error;
  };
  struct LinkWait {
    std::deque<std::shared_ptr<LinkWaiter>> queue;
    bool opened = false, failed = false;
    bool reopening = false;  // the link was open once before this attempt (linkWaitLimit applies)
  };
  asio::awaitable<std::error_code> awaitLink(LinkKey key);
  void releaseNext(const LinkKey& key, const std::shared_ptr<LinkWait>& wait);
  void endLinkWait(const LinkKey& key, const std::shared_ptr<LinkWait>& wait,
                   std::error_code error);
  asio::awaitable<void> watchSuspicion(LinkKey key, std::shared_ptr<LinkWait> wait);
  // Io thread.
  std::error_code startOnIo(Handlers& handlers, net::wire::ModelFingerprint model,
                            std::uint64_t seed);

  NetworkConfig config_;
  PeerId self_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  // Made, used and destroyed on the io thread (the mesh pointer also under viewMutex_, for
  // traffic() on other threads; its last counters stay readable after shutdown()).
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<net::Mesh> mesh_;
  std::unique_ptr<net::membership::Service> membership_;
  net::Endpoint endpoint_;
  mutable std::mutex viewMutex_;  // leaf: guards view_, heardFrom_, mesh_ (pointer), finalTraffic_
  std::array<net::TrafficCounters, net::kTrafficKinds> finalTraffic_{};
  net::membership::View view_;
  std::map<PeerId, net::Endpoint> heardFrom_;
  std::map<LinkKey, std::shared_ptr<LinkWait>> linkWaits_;  // io thread
  std::set<LinkKey> opened_;  // io thread: links that were open once (linkWaitLimit applies)
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<bool> joined_{false};
  std::atomic<std::uint64_t> life_{0};
  std::once_flag stopped_;
};

// Runs `f` on `io`'s thread and returns its result (or rethrows its exception). Not from the io
// thread itself.
template <typename F>
auto runOn(asio::io_context& io, F f) -> decltype(f());

}  // namespace gossamer::engine::runtime

#include <future>

#include <asio/post.hpp>

template <typename F>
auto gossamer::engine::runtime::runOn(asio::io_context& io, F f) -> decltype(f()) {
  std::packaged_task<decltype(f())()> task(std::move(f));
  auto result = task.get_future();
  asio::post(io, [&task] { task(); });
  return result.get();
}
