// net::relay::RelayHub: relayed links, for the two roles a member plays in them (net/mesh owns
// one and feeds it the Relay frames its links receive).
//
// - An end. open() makes a RelayedStream (relayed_link.h) to peer `expected` through the member
//   listening at `via` (the relay), sends the relay an `open` naming the target's address, and
//   runs the mesh's client handshake inside the stream. The target end, when the relay passes the
//   open on, makes the server side: its TLS accepts only the key its IdentityBook binds to the
//   source's id, and its server handshake only that id at the address the relay named; the link
//   then goes to RelayHost::adopt. So no member, the relay included, can pose as another through
//   a relay: it would need the other's identity key.
// - The relay. It passes an `open` on only when it comes from the source itself (the link's
//   authenticated id), relaying is on, fewer than maxStreams streams run, and it reaches the
//   target on a link whose handshake authenticated that id (a dial-out-only target is asked to
//   open it); refusals go back as `close` with a reason. Then it
//   forwards `data` and `close` between the two ends' links, data paced to `budgetBytesPerSecond`
//   when set, and closes the streams of a peer whose link to it broke (linkLost), telling the
//   other end.
//
// Threading: the mesh's io thread. Counters: any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>

#include "net/mesh/mesh.h"
#include "net/relay/relay_options.h"
#include "net/relay/relayed_link.h"
#include "net/wire/handshake.h"
#include "net/wire/handshake_server.h"

namespace gossamer::net::relay {

// What the hub needs from its mesh. Every send goes on the data channel.
class RelayHost {
 public:
  virtual ~RelayHost() = default;
  // Sends on the link to peer `peer` listening at `at`: an open one, or with `mayOpen` one
  // opened first as any send would (a dial-out-only peer is asked to open it: connection
  // reversal). An error (not_connected) when there is none, or the link there belongs to
  // another peer (nothing is sent then).
  virtual asio::awaitable<std::error_code> sendOnLink(Endpoint at, std::uint64_t peer,
                                                      std::vector<std::byte> header,
                                                      std::span<const std::byte> payload,
                                                      bool mayOpen) = 0;
  // Sends to the member listening at `to` (a relay: it can be dialed), opening a link if needed.
  virtual asio::awaitable<std::error_code> sendTo(Endpoint to, std::vector<std::byte> header,
                                                  std::span<const std::byte> payload) = 0;
  // A relayed link whose server handshake passed (this peer is the target end).
  virtual void adopt(wire::AuthenticatedLink link, Endpoint via) = 0;
};

// The outcome of open(): as Mesh::open, and the link when it is open.
struct RelayedLinkResult {
  LinkOutcome outcome;
  std::unique_ptr<Link> link;
};

class RelayHub {
 public:
  RelayHub(asio::io_context& io, RelayHost& host, RelayOptions options);
  ~RelayHub();
  RelayHub(const RelayHub&) = delete;
  RelayHub& operator=(const RelayHub&) = delete;

  // An end: opens a relayed link for `channel` to peer `expected` listening at `member`, through
  // the member at `via`, within `timeout`. `handshake` is the mesh's (its identity and book).
  // Errors: Errc::identityMismatch when no key is bound to `expected` or another peer answered;
  // connection_refused with the relay's reason when it refused; the handshake's; timed_out.
  asio::awaitable<RelayedLinkResult> open(const wire::HandshakeConfig& handshake, Endpoint via,
                                          Endpoint member, std::uint64_t expected, Channel channel,
                                          std::chrono::milliseconds timeout);

  // A Relay frame from `from` (its link's authenticated sender); `payload` is a data frame's
  // bytes. Returns once it was forwarded or delivered (back-pressure for `from`'s link).
  asio::awaitable<void> onFrame(const wire::HandshakeConfig& handshake, const Remote& from,
                                wire::RelayHeader frame, std::span<const std::byte> payload);

  // The links with the peer `peer` listening at `at` broke: the streams through it or to it end.
  void linkLost(std::uint64_t peer, const Endpoint& at);
  // Ends every stream (the mesh closes).
  void close();

  // Bytes this member forwarded for others (data, both ways), and streams it relayed.
  std::uint64_t bytesRelayed() const { return bytesRelayed_.load(); }
  std::uint64_t streamsRelayed() const { return streamsRelayed_.load(); }

 private:
  // A stream this member relays: (source, stream) -> the two ends.
  struct Forward {
    Endpoint sourceAt;
    Endpoint targetAt;
    std::uint64_t target = 0;
  };
  // A stream this member is an end of: (source, stream) -> the stream and its relay.
  struct End {
    std::shared_ptr<RelayedStream> stream;
    Endpoint via;
    std::shared_ptr<std::string> why;  // set when the relay or the other end closed it
  };
  using Key = std::pair<std::uint64_t, std::uint64_t>;

  asio::awaitable<void> relayOpen(const Remote& from, const wire::RelayHeader& frame);
  asio::awaitable<void> relayOnward(const Remote& from, const wire::RelayHeader& frame,
                                    std::span<const std::byte> payload);
  void acceptStream(const wire::HandshakeConfig& handshake, const Remote& from,
                    const wire::RelayHeader& frame);
  void endStream(const Key& key, const End& end, const std::string& reason);
  // Sends `frame` on without waiting (refusals and closes).
  void post(Endpoint at, std::uint64_t peer, const wire::RelayHeader& frame);
  void postTo(Endpoint via, const wire::RelayHeader& frame);
  std::shared_ptr<RelayedStream> makeStream(const wire::HandshakeConfig& handshake, bool client,
                                            const Key& key, Endpoint via,
                                            const wire::IdentityKey& expected, std::uint64_t peer);
  // Waits until forwarding `bytes` more keeps within the budget.
  asio::awaitable<void> pace(std::size_t bytes);

  asio::io_context& io_;
  RelayHost& host_;
  RelayOptions options_;
  std::map<Key, Forward> forwards_;
  std::map<Key, End> ends_;
  std::mt19937_64 rng_;
  std::chrono::steady_clock::time_point budgetFreeAt_;  // when the bytes forwarded so far fit
  std::atomic<std::uint64_t> bytesRelayed_{0};
  std::atomic<std::uint64_t> streamsRelayed_{0};
  std::shared_ptr<bool> alive_;  // cleared at destruction: detached work stops
};

}  // namespace gossamer::net::relay
