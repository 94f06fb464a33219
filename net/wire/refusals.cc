#include "net/wire/refusals.h"

#include <algorithm>

#include <asio/error.hpp>
#include <asio/ssl/error.hpp>
#include <fmt/format.h>

#include "net/errors.h"

namespace gossamer::net::wire {

const char* describe(Refusal cause) {
  switch (cause) {
    case Refusal::closedEarly: return "closed before sending a byte";
    case Refusal::closedMidway: return "hung up mid-handshake";
    case Refusal::notTls: return "not TLS (plaintext, or not gossamer)";
    case Refusal::notPlaintext: return "TLS to this plaintext peer";
    case Refusal::notGossamer: return "not gossamer's handshake";
    case Refusal::wrongSecret: return "wrong secret or identity";
    case Refusal::wrongVersion: return "wrong protocol version";
    case Refusal::wrongCluster: return "another cluster or model";
    case Refusal::timedOut: return "timed out";
    case Refusal::tooManyPending: return "too many pending handshakes from one source";
    case Refusal::other: return "other error";
  }
  return "other error";
}

Refusal classify(std::error_code error, std::uint64_t bytesReceived) {
  if (error == asio::error::eof || error == asio::error::connection_reset ||
      error == asio::error::broken_pipe || error == asio::ssl::error::stream_truncated ||
      error == asio::error::connection_aborted)
    return bytesReceived == 0 ? Refusal::closedEarly : Refusal::closedMidway;
  if (error == Errc::peerSpeaksPlaintext) return Refusal::notTls;
  if (error == Errc::peerSpeaksTls) return Refusal::notPlaintext;
  if (error == Errc::malformedFrame || error == Errc::malformedMessage ||
      error == Errc::unexpectedMessage || error == Errc::frameTooLarge ||
      error == Errc::tooManyPayloads)
    return Refusal::notGossamer;
  if (error == Errc::authenticationFailed || error == Errc::identityMismatch)
    return Refusal::wrongSecret;
  if (error == Errc::versionMismatch) return Refusal::wrongVersion;
  if (error == Errc::clusterMismatch || error == Errc::modelMismatch) return Refusal::wrongCluster;
  if (error == Errc::handshakeTimeout) return Refusal::timedOut;
  if (error == Errc::tooManyHandshakes) return Refusal::tooManyPending;
  return Refusal::other;
}

std::string sourceOf(const std::string& remoteAddress) {
  if (!remoteAddress.empty() && remoteAddress.front() == '[') {
    const std::size_t close = remoteAddress.find(']');
    return close == std::string::npos ? remoteAddress : remoteAddress.substr(1, close - 1);
  }
  const std::size_t colon = remoteAddress.rfind(':');
  return colon == std::string::npos ? remoteAddress : remoteAddress.substr(0, colon);
}

RefusalLog::RefusalLog(Options options) : options_(options) {}

std::vector<std::string> RefusalLog::record(Refusal cause, const std::string& source,
                                            const std::string& detail, Clock::time_point now) {
  std::vector<std::string> lines;
  if (auto summary = flush(now)) lines.push_back(std::move(*summary));
  ++totals_[static_cast<std::size_t>(cause)];
  if (!open_) {
    open_ = true;
    windowStart_ = now;
    linesThisWindow_ = 0;
  }
  const auto key = std::pair{cause, source};
  const bool first = logged_.find(key) == logged_.end();
  if (first && linesThisWindow_ < options_.fullLines) {
    ++linesThisWindow_;
    logged_[key];  // seen in this window: the next ones are held back
    lines.push_back(fmt::format("refused an inbound handshake from {}: {}{}{}", source,
                                describe(cause), detail.empty() ? "" : ": ", detail));
  } else {
    ++logged_[key];
  }
  return lines;
}

std::optional<std::string> RefusalLog::flush(Clock::time_point now) {
  if (!open_ || now - windowStart_ < options_.window) return std::nullopt;
  return closeWindow();
}

std::optional<std::string> RefusalLog::closeWindow() {
  open_ = false;
  std::vector<std::pair<std::uint64_t, std::pair<Refusal, std::string>>> held;
  std::uint64_t total = 0;
  for (const auto& [key, count] : logged_)
    if (count > 0) {
      held.push_back({count, key});
      total += count;
    }
  logged_.clear();
  if (total == 0) return std::nullopt;
  // The largest counts first; ties in the order of cause, then source (the same every time).
  std::stable_sort(held.begin(), held.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string parts;
  std::uint64_t rest = 0;
  std::size_t restSources = 0;
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (i >= options_.sources) {
      rest += held[i].first;
      ++restSources;
      continue;
    }
    parts += fmt::format("{}{} {} from {}", parts.empty() ? "" : ", ", held[i].first,
                         describe(held[i].second.first), held[i].second.second);
  }
  if (rest > 0) parts += fmt::format(", {} from {} other sources or causes", rest, restSources);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(options_.window).count();
  return fmt::format("refused {} more inbound handshakes in the last {} s: {}", total, seconds,
                     parts);
}

}  // namespace gossamer::net::wire
