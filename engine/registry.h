// The registry: every pluggable component by name. ONE explicit object,
// filled in one file (engine/builtin.cc) by makeBuiltinRegistry(); users add their own entries
// to it before starting a peer. No static self-registration.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/algorithm.h"
#include "engine/data/dataset.h"
#include "engine/model.h"
#include "kernels/compute.h"
#include "net/endpoint.h"
#include "net/tcp/tls.h"
#include "net/transport.h"
#include "topology/topology.h"

namespace asio {
class io_context;
}

namespace gossamer::engine {

// Factories of one kind, by name, each with a one-line description for --help.
template <typename Factory>
class NamedFactories {
 public:
  // `kind` names the entries in error messages ("model", "algorithm").
  explicit NamedFactories(std::string kind) : kind_(std::move(kind)) {}
  // Throws gossamer::Error when `name` is taken.
  void add(const std::string& name, std::string description, Factory factory);
  // Throws gossamer::Error listing the known names when `name` is unknown.
  const Factory& get(const std::string& name) const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;
  // The one-line description of `name` (throws as get() does).
  const std::string& description(const std::string& name) const;
  // "name: description" lines, for --help.
  std::string describe() const;

 private:
  std::string kind_;
  std::map<std::string, std::pair<std::string, Factory>> entries_;
};

// What a model factory is told: the data shape and the user's architecture flags.
struct ModelConfig {
  std::size_t inputs = 784;
  std::size_t classes = 10;
  std::vector<std::size_t> hidden = {256, 256};
  std::size_t maxBatch = 256;
};
using ModelFactory =
    std::function<std::unique_ptr<Model>(kernels::Compute& compute, const ModelConfig& config)>;

// What a dataset factory is told. It returns the training and the test set.
struct DatasetConfig {
  std::string dataDir;            // empty: the dataset's default location
  std::size_t trainSamples = 0;   // 0: all; else the first N of the (deterministic) set
  std::size_t testSamples = 0;
  std::uint64_t seed = 1;         // for generated datasets
};
struct DatasetPair {
  data::Dataset train;
  data::Dataset test;
};
using DatasetFactory = std::function<DatasetPair(const DatasetConfig& config)>;

// Topologies by name (topology/ holds the built-ins); the options carry every topology's knobs.
using TopologyFactory =
    std::function<std::unique_ptr<topology::Topology>(const topology::TopologyOptions& options)>;

// What a transport is given when a peer starts: the io_context its sockets and links live on (the
// peer's io thread), the device memory the peer's payloads may live in (a CUDA peer's; a
// transport that can reach it registers it, the others ignore it), and the TLS context its TCP
// connections use (null: plaintext; a transport without TCP connections, inproc, ignores it).
struct TransportEnvironment {
  asio::io_context& io;
  net::DeviceMemory deviceMemory;
  std::shared_ptr<net::tcp::TlsContext> tls;
};
// A transport ready to make: its options parsed and checked, and what its peers share (an
// in-process hub) made once. Called once per peer; the peers given one maker share that state.
using TransportMaker =
    std::function<std::unique_ptr<net::Transport>(const TransportEnvironment& environment)>;

// How the registry makes a transport: its options (name, default, help), where a peer listens
// when the user names nothing, and `prepare`, which parses option values (unknown names and bad
// values throw gossamer::Error) into a maker. `viable`, when set, tells whether this machine can
// run it, with the reason when not (an RDMA device is missing); unset: always.
struct TransportSpec {
  std::vector<OptionInfo> options;
  net::Endpoint defaultListen;
  std::function<TransportMaker(const OptionValues& values)> prepare;
  std::function<bool(const OptionValues& values, std::string* reason)> viable;
};

// The spec of a transport with a typed options struct O (with a `bind` as algorithms' options
// have); `prepare` turns parsed options into a maker.
template <typename O>
TransportSpec transportSpec(net::Endpoint defaultListen,
                            std::function<TransportMaker(const O& options)> prepare,
                            std::function<bool(const O& options, std::string* reason)> viable = {}) {
  TransportSpec spec{describeOptions<O>(), std::move(defaultListen),
                     [prepare](const OptionValues& values) {
                       return prepare(parseOptions<O>(values));
                     },
                     {}};
  if (viable)
    spec.viable = [viable](const OptionValues& values, std::string* reason) {
      return viable(parseOptions<O>(values), reason);
    };
  return spec;
}

struct Registry {
  NamedFactories<ModelFactory> models{"model"};
  NamedFactories<DatasetFactory> datasets{"dataset"};
  NamedFactories<TopologyFactory> topologies{"topology"};
  // Decentralized optimizers (algorithms/ holds the built-ins: algorithms::addBuiltinAlgorithms).
  NamedFactories<AlgorithmSpec> algorithms{"algorithm"};
  // Transports (net/ holds the backends; engine/builtin.cc registers tcp, inproc and ibverbs).
  NamedFactories<TransportSpec> transports{"transport"};
};

}  // namespace gossamer::engine

#include "engine/registry_inl.h"
