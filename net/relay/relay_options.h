// What a member lends to relayed links between others (net/relay/relay_hub.h).
#pragma once

#include <cstddef>

namespace gossamer::net::relay {

struct RelayOptions {
  bool enabled = true;              // false (--relay off): refuse to relay for others
  double budgetBytesPerSecond = 0;  // --relay-budget: the most this member forwards (0: no bound)
  std::size_t maxStreams = 256;     // streams relayed at once
};

}  // namespace gossamer::net::relay
