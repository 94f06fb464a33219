// ControlNode (engine/runtime/control_node.h) configurations for tests of the runtime's own
// protocols: in-process links on one hub per test binary, a fixed secret, loopback SWIM timings.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "engine/runtime/control_node.h"
#include "tests/algorithms/algorithm_testing.h"

namespace gossamer::test {

// A node's network config; `seed`: the node it joins through (none: it starts the cluster).
inline engine::runtime::NetworkConfig controlNodeConfig(std::optional<net::Endpoint> seed, std::byte secret) {
  static const engine::TransportMaker hub = sharedInprocNetwork();
  engine::runtime::NetworkConfig c;
  c.transport = "inproc";
  c.transportMaker = hub;
  c.secret = std::vector<std::byte>(32, secret);
  c.membership = net::membership::Options::local();
  if (seed) c.seeds = {*seed};
  engine::runtime::prepareTransport(c, registry());
  return c;
}

}  // namespace gossamer::test
