// none: no exchange. Every peer trains alone on its shard with the local optimizer. A single peer
// (gossamer-peer without --local, --listen or --seeds) is a cluster of one running this; in a
// cluster it is the floor that every decentralized method should beat.
//
//   communication    none
//   messages / step  0
//   bytes on wire    0
//   staleness        not applicable: nothing is exchanged
//   invariant        each peer's model is plain local SGD (or the chosen optimizer) on its shard
//   paper            none; the baseline of every comparison
#pragma once

#include <string>

#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct NoExchangeOptions {
  template <typename Bind>
  void bind(Bind& /*b*/) {}
};

class NoExchange final : public engine::Algorithm {
 public:
  explicit NoExchange(NoExchangeOptions /*options*/ = {}) {}
  std::string name() const override { return "none"; }
  void setup(engine::PeerContext& /*ctx*/) override {}
};

}  // namespace gossamer::algorithms
