// The registry: every pluggable component by name (DESIGN.md section 3). ONE explicit object,
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
#include "topology/topology.h"

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

struct Registry {
  NamedFactories<ModelFactory> models{"model"};
  NamedFactories<DatasetFactory> datasets{"dataset"};
  NamedFactories<TopologyFactory> topologies{"topology"};
  // Decentralized optimizers (algorithms/ holds the built-ins: algorithms::addBuiltinAlgorithms).
  NamedFactories<AlgorithmSpec> algorithms{"algorithm"};
};

}  // namespace gossamer::engine

#include "engine/registry_inl.h"
