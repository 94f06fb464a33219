// net::relay::RelayedStream: one end of a link between two peers that cannot reach each other,
// whose bytes a third member (the relay) carries. It is a net::Link like a tcp link: frames go
// in the same wire format (prefix, header, payloads) into a SecureStream (TLS 1.3 between the two
// peers' identity keys), and its records go out in chunks through a ChunkSender (the mesh sends
// them to the relay, which forwards them to the other end); chunks from the other end come in
// through deliver(). The relay sees only ciphertext.
//
// Flow control: a send completes once its last chunk was handed to the ChunkSender (so a slow
// relay slows its senders down); deliver() waits while more than kMaxBacklogBytes of plaintext
// wait to be received, so a slow receiver slows down the relay's link to it, and so the sender.
// Errors: the SecureStream's (authenticationFailed while the TLS handshake fails, or
// tlsRecordRejected for altered bytes), the ChunkSender's, or the one fail() names (the relay
// closed the stream, or the link to the relay broke); every error closes the stream.
// Threading: one io thread (the mesh's); close() from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include "net/limits.h"
#include "net/transport.h"
#include "net/wire/identity.h"

namespace gossamer::net::relay {

// Sends one chunk of ciphertext toward the other end, after every chunk sent before it.
using ChunkSender = std::function<asio::awaitable<std::error_code>(std::vector<std::byte> chunk)>;

struct RelayedStreamOptions {
  bool client = true;  // the end that opened the stream (the TLS client)
  std::shared_ptr<const wire::Identity> self;
  wire::IdentityKey expected{};  // the key bound to the peer at the other end
  ChunkSender sender;
  Limits limits;
  std::string remote;  // what remoteAddress() says ("relayed by 203.0.113.1:7000")
  // Called once, on the io thread, when the stream closes (for whatever reason), with the error.
  std::function<void(std::error_code)> onClosed;
};

class RelayedStream final : public std::enable_shared_from_this<RelayedStream> {
 public:
  // Plaintext that may wait for the receiver before deliver() waits (see above).
  static constexpr std::size_t kMaxBacklogBytes = 16 << 20;
  // The largest chunk handed to the ChunkSender: sends are cut at this much ciphertext.
  static constexpr std::size_t kChunkBytes = 1 << 20;

  // Throws gossamer::Error when OpenSSL cannot set the stream up.
  static std::shared_ptr<RelayedStream> make(const asio::any_io_executor& executor,
                                             RelayedStreamOptions options);
  ~RelayedStream();

  // The Link over the stream (call once; dropping the Link closes the stream).
  std::unique_ptr<Link> link();

  // The client's first flight goes out (the relay knows of the stream by then). Client only.
  void start();
  // Why the TLS handshake failed (OpenSSL's reason), empty otherwise.
  const std::string& tlsReason() const;

  // Ciphertext from the other end, in order. Returns the stream's error once it failed.
  asio::awaitable<std::error_code> deliver(std::span<const std::byte> ciphertext);
  // Closes the stream with `reason` (the relay closed it, or the link to the relay broke).
  void fail(std::error_code reason);
  bool closed() const;

  // The Link's operations (SharedStateLink forwards to them).
  static asio::awaitable<std::error_code> send(std::shared_ptr<RelayedStream> self, OutFrame frame);
  static asio::awaitable<std::error_code> receive(std::shared_ptr<RelayedStream> self,
                                                  InFrame& frame);
  void setPayloadTarget(PayloadTarget target);
  void close();
  const std::string& remoteAddress() const;
  std::uint64_t bytesSent() const;
  std::uint64_t bytesReceived() const;

  struct State;  // relayed_link.cc

 private:
  explicit RelayedStream(std::unique_ptr<State> state);
  // Hands the ciphertext made so far to the sender, in turn with the sends.
  void flushSoon();
  std::unique_ptr<State> state_;
};

}  // namespace gossamer::net::relay
