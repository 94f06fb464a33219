#include "net/striped/striped_link.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "net/errors.h"
#include "net/link_support.h"

namespace gossamer::net::striped {
namespace {

using asio::awaitable;
using detail::kUseTuple;
using detail::loadLe;
using detail::storeLe;

// The inner operations of one frame: each finishes once; the frame's coroutine waits for all.
struct Group {
  Group(const asio::any_io_executor& executor, std::size_t count)
      : done(executor, asio::steady_timer::time_point::max()), pending(count) {}
  void finish(std::error_code ec) {
    if (ec && !error) error = ec;
    if (--pending == 0) done.cancel();
  }
  awaitable<void> wait() {
    while (pending > 0) co_await done.async_wait(kUseTuple);
  }

  asio::steady_timer done;
  std::size_t pending;
  std::error_code error;
  std::vector<std::vector<std::byte>> headers;  // sends: the inner frames' headers
  std::vector<std::vector<std::span<const std::byte>>> payloads;
  std::vector<InFrame> frames;  // receives: the chunks
};

class StripedState final : public std::enable_shared_from_this<StripedState> {
 public:
  StripedState(asio::any_io_executor executor, std::vector<std::unique_ptr<Link>> streams,
               const Limits& limits, std::size_t stripeBytes)
      : executor_(std::move(executor)),
        streams_(std::move(streams)),
        limits_(limits),
        stripeBytes_(std::max<std::size_t>(1, stripeBytes)),
        pool_(std::make_shared<detail::BufferPool>(limits.maxBufferedBytes)),
        expected_(streams_.size()) {}

  // Points every stream's payloads at the frame being received (after construction: the hooks
  // hold a weak reference to this state).
  void init() {
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      streams_[i]->setPayloadTarget(
          [weak = weak_from_this(), i](std::span<const std::byte> header, std::size_t index,
                                       std::size_t size) -> std::span<std::byte> {
            const std::shared_ptr<StripedState> self = weak.lock();
            if (!self || header.empty()) return {};
            if (header[0] == kWholeFrame && i == 0 && self->target_) {
              return self->target_(header.subspan(1), index, size);
            }
            const std::vector<std::span<std::byte>>& pieces = self->expected_[i];
            if (header[0] == kChunkFrame && index < pieces.size() && pieces[index].size() == size)
              return pieces[index];
            return {};  // the pool; the chunk's check then fails the link
          });
    }
  }

  static awaitable<std::error_code> send(std::shared_ptr<StripedState> self, OutFrame frame);
  static awaitable<std::error_code> receive(std::shared_ptr<StripedState> self, InFrame& frame);

  void setPayloadTarget(PayloadTarget target) { target_ = std::move(target); }
  void close() { closeWith(asio::error::operation_aborted); }
  std::string remoteAddress() const { return streams_.front()->remoteAddress(); }
  std::uint64_t bytesSent() const { return sum(&Link::bytesSent); }
  std::uint64_t bytesReceived() const { return sum(&Link::bytesReceived); }

 private:
  std::uint64_t sum(std::uint64_t (Link::*counter)() const) const {
    std::uint64_t total = 0;
    for (const auto& stream : streams_) total += ((*stream).*counter)();
    return total;
  }
  // The first error closes every stream; later operations return it.
  void closeWith(std::error_code ec) {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      error_ = ec;
      closed_ = true;
    }
    for (const auto& stream : streams_) stream->close();
    pool_->close();
  }
  std::error_code failure() const {
    std::lock_guard lock(mutex_);
    return error_;
  }
  std::error_code failWith(std::error_code ec) {
    closeWith(ec);
    return failure();
  }
  static awaitable<void> sendOne(std::shared_ptr<StripedState> self, std::shared_ptr<Group> group,
                                 std::size_t stream, std::size_t slot);
  static awaitable<void> receiveOne(std::shared_ptr<StripedState> self,
                                    std::shared_ptr<Group> group, std::size_t stream);
  awaitable<std::error_code> receiveStriped(InFrame& frame, std::span<const std::byte> lead);

  asio::any_io_executor executor_;
  const std::vector<std::unique_ptr<Link>> streams_;
  const Limits limits_;
  const std::size_t stripeBytes_;
  std::shared_ptr<detail::BufferPool> pool_;
  PayloadTarget target_;
  // Per stream: where the pieces of the chunk being received go.
  std::vector<std::vector<std::span<std::byte>>> expected_;
  detail::PayloadPlacement placement_;
  std::uint64_t sendSequence_ = 0;
  std::uint64_t receiveSequence_ = 0;
  bool receiving_ = false;
  mutable std::mutex mutex_;
  std::atomic<bool> closed_{false};
  std::error_code error_;  // guarded by mutex_
};

// co_spawn starts a coroutine by posting it, so the inner sends of one frame start in the order
// they were spawned, and before those of the next frame: every stream carries its inner frames
// in the order of the frames.
awaitable<void> StripedState::sendOne(std::shared_ptr<StripedState> self,
                                      std::shared_ptr<Group> group, std::size_t stream,
                                      std::size_t slot) {
  const std::error_code ec =
      co_await self->streams_[stream]->send(OutFrame(group->headers[slot], group->payloads[slot]));
  group->finish(ec);
}

awaitable<std::error_code> StripedState::send(std::shared_ptr<StripedState> self, OutFrame frame) {
  if (self->closed_) co_return self->failure();
  if (auto ec = detail::checkFrameShape(frame, self->limits_)) co_return ec;
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const auto& payload : frame.payloads) {
    sizes.push_back(payload.size());
    total += payload.size();
  }
  const std::size_t used = streamsFor(total, self->streams_.size(), self->stripeBytes_);
  auto group = std::make_shared<Group>(self->executor_, used == 1 ? 1 : used + 1);
  const auto header = frame.header;
  if (used == 1) {
    std::vector<std::byte> whole(header.size() + 1);
    whole[0] = kWholeFrame;
    std::copy(header.begin(), header.end(), whole.begin() + 1);
    group->headers.push_back(std::move(whole));
    group->payloads.push_back(std::move(frame.payloads));
    asio::co_spawn(self->executor_, sendOne(self, group, 0, 0), asio::detached);
  } else {
    std::vector<std::byte> lead(kLeadFixedBytes + 8 * sizes.size() + header.size());
    lead[0] = kLeadFrame;
    lead[1] = static_cast<std::byte>(used);
    lead[2] = static_cast<std::byte>(sizes.size());
    const std::uint64_t sequence = self->sendSequence_++;
    storeLe(&lead[4], sequence, 8);
    for (std::size_t i = 0; i < sizes.size(); ++i)
      storeLe(&lead[kLeadFixedBytes + 8 * i], sizes[i], 8);
    std::copy(header.begin(), header.end(), lead.begin() + kLeadFixedBytes + 8 * sizes.size());
    group->headers.push_back(std::move(lead));
    group->payloads.emplace_back();
    for (std::size_t i = 0; i < used; ++i) {
      std::vector<std::byte> chunk(kChunkHeaderBytes);
      chunk[0] = kChunkFrame;
      chunk[1] = static_cast<std::byte>(i);
      storeLe(&chunk[8], sequence, 8);
      group->headers.push_back(std::move(chunk));
      std::vector<std::span<const std::byte>> pieces;
      for (const Piece& piece : chunkPieces(sizes, used, i))
        pieces.push_back(frame.payloads[piece.payload].subspan(piece.offset, piece.size));
      group->payloads.push_back(std::move(pieces));
    }
    asio::co_spawn(self->executor_, sendOne(self, group, 0, 0), asio::detached);
    for (std::size_t i = 0; i < used; ++i)
      asio::co_spawn(self->executor_, sendOne(self, group, i, i + 1), asio::detached);
  }
  co_await group->wait();
  if (group->error) co_return self->failWith(group->error);
  co_return std::error_code{};
}

awaitable<void> StripedState::receiveOne(std::shared_ptr<StripedState> self,
                                         std::shared_ptr<Group> group, std::size_t stream) {
  const std::error_code ec = co_await self->streams_[stream]->receive(group->frames[stream]);
  group->finish(ec);
}

awaitable<std::error_code> StripedState::receive(std::shared_ptr<StripedState> self,
                                                 InFrame& frame) {
  if (self->receiving_) co_return Errc::receiveInProgress;
  frame.payloads.clear();
  frame.header.clear();
  if (self->closed_) co_return self->failure();
  struct Scope {
    StripedState& link;
    bool finished = false;
    ~Scope() {
      link.receiving_ = false;
      if (!finished) link.closeWith(asio::error::operation_aborted);
    }
  } scope{*self};
  self->receiving_ = true;
  InFrame first;
  std::error_code ec = co_await self->streams_.front()->receive(first);
  if (!ec && first.header.empty()) ec = Errc::malformedFrame;
  if (!ec && first.header[0] == kWholeFrame) {
    frame.header.assign(first.header.begin() + 1, first.header.end());
    frame.payloads = std::move(first.payloads);
  } else if (!ec && first.header[0] == kLeadFrame && first.payloads.empty()) {
    ec = co_await self->receiveStriped(frame, first.header);
  } else if (!ec) {
    ec = Errc::malformedFrame;
  }
  scope.finished = true;
  if (ec) {
    frame.payloads.clear();
    co_return self->failWith(ec);
  }
  co_return std::error_code{};
}

awaitable<std::error_code> StripedState::receiveStriped(InFrame& frame,
                                                        std::span<const std::byte> lead) {
  if (lead.size() < kLeadFixedBytes) co_return Errc::malformedFrame;
  const std::size_t used = static_cast<std::size_t>(lead[1]);
  const std::size_t count = static_cast<std::size_t>(lead[2]);
  const std::uint64_t sequence = loadLe(&lead[4], 8);
  if (used < 2 || used > streams_.size() || sequence != receiveSequence_ ||
      lead.size() < kLeadFixedBytes + 8 * count) {
    co_return Errc::malformedFrame;
  }
  ++receiveSequence_;
  std::vector<std::uint64_t> sizes(count);
  for (std::size_t i = 0; i < count; ++i) sizes[i] = loadLe(&lead[kLeadFixedBytes + 8 * i], 8);
  const std::span<const std::byte> header = lead.subspan(kLeadFixedBytes + 8 * count);
  if (auto ec = detail::checkFrameShape(
          header.size(), count, [&](std::size_t i) { return sizes[i]; }, limits_)) {
    co_return ec;
  }
  frame.header.assign(header.begin(), header.end());
  if (auto ec = co_await detail::placePayloads(target_, *pool_, sizes, frame, placement_))
    co_return ec;

  auto group = std::make_shared<Group>(executor_, used);
  group->frames.resize(used);
  for (std::size_t i = 0; i < used; ++i) {
    expected_[i].clear();
    for (const Piece& piece : chunkPieces(sizes, used, i)) {
      expected_[i].push_back(
          frame.payloads[piece.payload].bytes().subspan(piece.offset, piece.size));
    }
  }
  for (std::size_t i = 0; i < used; ++i)
    asio::co_spawn(executor_, receiveOne(shared_from_this(), group, i), asio::detached);
  co_await group->wait();
  std::error_code ec = group->error;
  for (std::size_t i = 0; i < used && !ec; ++i) {
    const InFrame& chunk = group->frames[i];
    bool valid = chunk.header.size() == kChunkHeaderBytes && chunk.header[0] == kChunkFrame &&
                 static_cast<std::size_t>(chunk.header[1]) == i &&
                 loadLe(&chunk.header[8], 8) == sequence &&
                 chunk.payloads.size() == expected_[i].size();
    for (std::size_t p = 0; valid && p < chunk.payloads.size(); ++p) {
      valid =
          !chunk.payloads[p].pooled() && chunk.payloads[p].bytes().data() == expected_[i][p].data();
    }
    if (!valid) ec = Errc::malformedFrame;
  }
  for (auto& pieces : expected_) pieces.clear();
  co_return ec;
}

}  // namespace

std::vector<Piece> chunkPieces(std::span<const std::uint64_t> sizes, std::size_t streams,
                               std::size_t index) {
  std::uint64_t total = 0;
  for (const std::uint64_t size : sizes) total += size;
  const std::uint64_t chunk = (total + streams - 1) / streams;
  const std::uint64_t begin = std::min(total, chunk * index);
  const std::uint64_t end = std::min(total, chunk * (index + 1));
  std::vector<Piece> pieces;
  std::uint64_t at = 0;  // where payload p starts in the concatenation
  for (std::size_t p = 0; p < sizes.size(); at += sizes[p], ++p) {
    const std::uint64_t from = std::max(begin, at);
    const std::uint64_t to = std::min(end, at + sizes[p]);
    if (from < to)
      pieces.push_back(
          {p, static_cast<std::size_t>(from - at), static_cast<std::size_t>(to - from)});
  }
  return pieces;
}

std::size_t streamsFor(std::uint64_t totalBytes, std::size_t streams, std::size_t stripeBytes) {
  if (streams < 2 || totalBytes < 2 * static_cast<std::uint64_t>(stripeBytes)) return 1;
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(streams, totalBytes / static_cast<std::uint64_t>(stripeBytes)));
}

std::unique_ptr<Link> makeStripedLink(asio::any_io_executor executor,
                                      std::vector<std::unique_ptr<Link>> streams,
                                      const Limits& limits, std::size_t stripeBytes) {
  auto state =
      std::make_shared<StripedState>(std::move(executor), std::move(streams), limits, stripeBytes);
  state->init();
  return std::make_unique<detail::SharedStateLink<StripedState>>(std::move(state));
}

}  // namespace gossamer::net::striped
