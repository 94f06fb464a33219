#include "engine/runtime/tcp_streams.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::engine::runtime {
namespace {

// The numbers of a /proc/sys file (one, or tcp_rmem's three); empty when unreadable.
std::vector<std::int64_t> readSysctl(const char* path) {
  std::ifstream in(path);
  std::vector<std::int64_t> values;
  for (std::int64_t value = 0; in >> value;) values.push_back(value);
  return values;
}

// What Linux grants for one buffer: 2 x the request, capped at 2 x the core maximum; the
// autotuning maximum when nothing is requested.
std::uint64_t grantedBuffer(std::int64_t requested, const char* coreMax, const char* autotune) {
  if (requested <= 0) {
    const std::vector<std::int64_t> limits = readSysctl(autotune);
    return limits.size() == 3 ? static_cast<std::uint64_t>(limits[2]) : std::uint64_t{6} << 20;
  }
  const std::vector<std::int64_t> max = readSysctl(coreMax);
  const std::int64_t cap = max.size() == 1 ? max[0] : requested;
  return 2 * static_cast<std::uint64_t>(std::min(requested, cap));
}

std::int64_t transportOption(const NetworkConfig& n, const char* key, std::int64_t fallback) {
  const auto it = n.transportOptions.find(key);
  if (it == n.transportOptions.end()) return fallback;
  std::int64_t value = fallback;
  std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
  return value;
}

}  // namespace

std::size_t parseTcpStreams(const std::string& text) {
  if (text == "auto") return 0;
  std::size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  GOSSAMER_ENFORCE(ec == std::errc() && end == text.data() + text.size() && value >= 1 &&
                       value <= kMaxTcpStreams,
                   "--tcp-streams takes auto or a count of connections in [1, {}], not '{}'",
                   kMaxTcpStreams, text);
  return value;
}

std::uint64_t tcpWindowBytes(std::int64_t sendBufferBytes, std::int64_t receiveBufferBytes) {
  return std::min(
      grantedBuffer(sendBufferBytes, "/proc/sys/net/core/wmem_max", "/proc/sys/net/ipv4/tcp_wmem"),
      grantedBuffer(receiveBufferBytes, "/proc/sys/net/core/rmem_max",
                    "/proc/sys/net/ipv4/tcp_rmem"));
}

net::striped::PathHint pathToward(const NetworkConfig& n, const net::Endpoint& remote) {
  if (n.profile) {
    const net::shaped::NetworkProfile& profile = *n.profile;
    std::optional<std::size_t> site = profile.siteOfEndpoint(remote);
    if (!site && n.indexOf) {
      if (const std::optional<std::size_t> index = n.indexOf(remote))
        site = profile.siteOfPeer(*index);
    }
    if (!site) return {};
    const net::shaped::LinkProfile& link = profile.link(profile.siteOfPeer(n.profileIndex), *site);
    return {link.flowWindowBytes, link.bandwidthBitsPerSecond};
  }
  // tcp's defaults (net/tcp/tcp_transport.h): 4 MiB buffers.
  return {tcpWindowBytes(transportOption(n, "send-buffer-bytes", 4 << 20),
                         transportOption(n, "receive-buffer-bytes", 4 << 20)),
          net::striped::localInterfaceBitsPerSecond()};
}

PathEstimate estimatePath(const NetworkConfig& n, const net::Endpoint& remote,
                          std::chrono::duration<double> roundTrip) {
  const net::striped::PathHint path = pathToward(n, remote);
  std::size_t streams = 1;
  if (n.transport == "tcp") {
    streams = n.tcpStreams > 0 ? n.tcpStreams
                               : net::striped::autoStreams(roundTrip, path, kMaxTcpStreams);
  }
  // The bandwidth of the round trip to the millisecond: the same link measured twice gives the
  // same figure (below a millisecond, nothing the window limits).
  const std::chrono::duration<double> rounded(std::round(roundTrip.count() * 1e3) / 1e3);
  return {roundTrip.count(), net::striped::pathBitsPerSecond(path, rounded, streams) / 8};
}

std::unique_ptr<net::Transport> withTcpStreams(std::unique_ptr<net::Transport> transport,
                                               const NetworkConfig& n) {
  if (n.transport != "tcp") return transport;
  net::striped::Options options;
  options.streams = n.tcpStreams;
  options.maxStreams = kMaxTcpStreams;
  options.setupTimeout = n.connectTimeout;
  options.pathOf = [n](const net::Endpoint& remote) { return pathToward(n, remote); };
  options.onConnect = [n](const net::Endpoint& remote, std::size_t streams,
                          std::chrono::duration<double> rtt) {
    std::string why = "fixed";
    if (n.tcpStreams == 0) {
      const net::striped::PathHint path = pathToward(n, remote);
      why = fmt::format("auto: round trip {:.1f} ms, window {:.1f} MiB, capacity {}",
                        rtt.count() * 1e3, static_cast<double>(path.flowWindowBytes) / (1 << 20),
                        path.capacityBitsPerSecond > 0
                            ? fmt::format("{:.0f} Mbit/s", path.capacityBitsPerSecond / 1e6)
                            : fmt::format("unknown, {:.0f} Mbit/s assumed",
                                          net::striped::kAssumedCapacityBitsPerSecond / 1e6));
    }
    log::get("net")->log(streams > 1 ? spdlog::level::info : spdlog::level::debug,
                         "tcp link to {}: {} connection{} ({})", remote.str(), streams,
                         streams == 1 ? "" : "s", why);
  };
  return net::striped::makeTransport(std::move(transport), std::move(options));
}

}  // namespace gossamer::engine::runtime
