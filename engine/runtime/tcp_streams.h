// Connections per tcp link (--tcp-streams): the striped transport (net/striped) around a peer's
// tcp transport, outside its emulated network, so that each connection is shaped as one flow.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "engine/runtime/config.h"
#include "net/striped/striped_transport.h"
#include "net/transport.h"

namespace gossamer::engine::runtime {

// The most connections a link may have.
inline constexpr std::size_t kMaxTcpStreams = 64;

// "auto" -> 0, else a count in [1, kMaxTcpStreams]; throws gossamer::Error naming the flag.
std::size_t parseTcpStreams(const std::string& text);

// One connection's window on this host: the socket buffers tcp asks for (`sendBufferBytes`,
// `receiveBufferBytes`; 0 = the kernel's autotuning), as Linux grants them: doubled and capped
// at net.core.wmem_max / rmem_max (the autotuning maximum of tcp_wmem / tcp_rmem for 0).
std::uint64_t tcpWindowBytes(std::int64_t sendBufferBytes, std::int64_t receiveBufferBytes);

// The path toward `remote` for `auto`: the profile's link when the network is emulated (its
// per-flow window and capacity), else this host's window and fastest interface.
net::striped::PathHint pathToward(const NetworkConfig& n, const net::Endpoint& remote);

// The path toward `remote` at the measured round trip: its bandwidth from pathToward and the
// connections a link there has (tcp: the fixed count or autoStreams; other transports: one), at
// the round trip to the millisecond.
PathEstimate estimatePath(const NetworkConfig& n, const net::Endpoint& remote,
                          std::chrono::duration<double> roundTrip);

// `transport` wrapped in the striped transport when n.transport is tcp; else unchanged.
std::unique_ptr<net::Transport> withTcpStreams(std::unique_ptr<net::Transport> transport,
                                               const NetworkConfig& n);

}  // namespace gossamer::engine::runtime
