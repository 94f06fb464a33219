// The experiment matrix of `gossamer-bench convergence`: settings every experiment shares (so the
// comparison is fair), the lists whose product is the matrix, and each algorithm's options.
//
// Config file format ('#' starts a comment; `--print-config` writes a preset in it):
//   [run]                      shared settings, KEY = VALUE: the run-level settings of
//                              engine/peer_settings*.cc that front end kRun takes, each checked
//                              by its setting's rule (lr, compress: as gossamer-peer's flag)
//   model = mlp                mlp, softmax, lenet or cnn
//   hidden = 256,256
//   ...
//   [matrix]                   comma-separated lists; their product is the experiment list;
//                              a list of a setting's values (kMatrix) checks each as the setting
//   algorithms = allreduce-sgd, gosgd, dpsgd
//   topologies = default       "default": each algorithm's own; else topology names
//   networks = lan, geo        built-in profiles or profile files (net/shaped)
//   peers = 4, 8
//   splits = iid, dirichlet:0.5
//   step-time = 0, 300         milliseconds of emulated compute per step (default: [run]'s);
//                              `step-times` is the same list
//   compress = none, int8      codecs of the payloads algorithms let travel compressed (default:
//                              [run]'s; gossamer-peer's --compress)
//   [gosgd]                    options of one algorithm (as --gosgd.p on gossamer-peer)
//   p = 0.1
// Every error is a gossamer::Error naming FILE:LINE; an unknown key names the closest known one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/options.h"

namespace gossamer::bench {

struct RunSettings {
  std::string model = "mlp";
  std::vector<std::size_t> hidden = {256, 256};
  std::string dataset = "fashion-mnist";
  std::size_t trainSamples = 0;  // 0: all
  std::size_t testSamples = 0;
  std::string optimizer = "momentum";
  double lr = 0.05;
  std::string schedule = "cosine";
  std::size_t batch = 64;
  double epochs = 3;        // passes of the whole cluster over the training set
  std::uint64_t steps = 0;  // > 0: every peer takes this many steps instead
  double maxSeconds = 120;  // wall-clock budget of one experiment (training stops then)
  // The consensus is evaluated at the evaluation points, every this many steps of every peer
  // (engine/runtime/eval_points.h: time to a target exact to the point)...
  std::uint64_t evalEverySteps = 25;
  // ... or, when this is above 0, instead every this many seconds of wall time, at whatever step
  // each peer is then (coarse: a time to a target resolves to these seconds).
  double evalSeconds = 0;
  std::size_t evalSamples = 2000;
  double target = 0.85;   // consensus accuracy that "time to target" refers to
  double targetLoss = 0;  // consensus test loss that "time to target loss" refers to; 0: none
  // The algorithm the speed-ups and byte ratios compare with (same network, peers, split and
  // step time).
  std::string baseline = "allreduce-sgd";
  std::uint64_t seed = 1;
  std::string transport = "inproc";  // the local cluster's transport under the emulated network
  std::string tcpStreams = "auto";   // connections per tcp link: auto or a count
  double commTimeout = 30;           // seconds: deadline of synchronous waits
  double stepTime = 0;  // milliseconds of emulated compute per step (0: the real compute only)
  std::vector<double> peerStepTimes;  // milliseconds per peer, repeating (empty: stepTime)
  std::string compress = "none";      // codec of compressible payloads (kernels/codec.h)
  std::string errorFeedback = "on";   // on or off

  // The fields by the names of their settings (bench/bench_settings.h): every [run] key, its
  // help, type and check, is declared once with gossamer-peer's (engine/peer_settings*.cc).
  template <typename Bind>
  void bind(Bind& b) {
    b("model", model);
    b("hidden", hidden);
    b("dataset", dataset);
    b("train-samples", trainSamples);
    b("test-samples", testSamples);
    b("optimizer", optimizer);
    b("lr", lr);
    b("schedule", schedule);
    b("batch", batch);
    b("epochs", epochs);
    b("steps", steps);
    b("max-seconds", maxSeconds);
    b("eval-every-steps", evalEverySteps);
    b("eval-seconds", evalSeconds);
    b("eval-samples", evalSamples);
    b("target", target);
    b("target-loss", targetLoss);
    b("baseline", baseline);
    b("seed", seed);
    b("transport", transport);
    b("tcp-streams", tcpStreams);
    b("comm-timeout", commTimeout);
    b("step-time", stepTime);
    b("peer-step-times", peerStepTimes);
    b("compress", compress);
    b("error-feedback", errorFeedback);
  }
  // Each value by its setting's rule, and the rules between them; throws gossamer::Error.
  void validate() const;
};

// How the training set is split over the peers.
struct Split {
  std::string kind = "iid";  // or "dirichlet"
  double alpha = 0.5;        // dirichlet concentration
  std::string name() const;  // "iid", "dirichlet:0.5"
};

struct Experiment {
  std::string algorithm;
  std::string topology;  // empty: the algorithm's default
  std::string network;
  std::size_t peers = 4;
  Split split;
  double stepTime = 0;            // milliseconds of emulated compute per step
  std::string compress = "none";  // the codec, in its canonical text
  engine::OptionValues options;
  // "gosgd/default/geo/4p/iid" (and "/300ms" with a step time, "/int8:256" with a codec): unique
  // within a matrix, safe in file names after replacing '/' and ':'.
  std::string name() const;
  // "allreduce-sgd", or "allreduce-sgd + int8:256" when compressed.
  std::string label() const;
};

struct Matrix {
  RunSettings run;
  std::vector<std::string> algorithms;
  std::vector<std::string> topologies{"default"};
  std::vector<std::string> networks{"lan"};
  std::vector<std::size_t> peers{4};
  std::vector<Split> splits{Split{}};
  std::vector<double> stepTimes;                        // empty: run.stepTime alone
  std::vector<std::string> compress;                    // empty: run.compress alone
  std::map<std::string, engine::OptionValues> options;  // by algorithm

  // The product of the lists, in a stable order (step time, network, peers, split, topology,
  // codec, algorithm).
  std::vector<Experiment> experiments() const;
};

// A matrix with a name: a preset may run several, each with its own shared settings (the full
// preset's geo block at a 300 ms step time trains fewer passes to a lower target).
struct Block {
  std::string name;  // a file-name-safe word; empty for a config file's single matrix
  Matrix matrix;
};

// "quick" (a newcomer's first run: <= 10 minutes on a 2-core machine), "full" (every algorithm on
// lan, wan and geo, iid and Dirichlet, then every algorithm on lan and geo at a 300 ms step time),
// or "seed002" (the regime of seed 002: a model of ResNet-50's size at ~300 ms a step); throws
// listing them otherwise.
std::vector<Block> presetBlocks(const std::string& name);
// The first block of presetBlocks(name).
Matrix presetMatrix(const std::string& name);
Matrix parseMatrix(const std::string& text, const std::string& source);
Matrix loadMatrix(const std::string& path);
// The matrix in the config file format; parseMatrix(formatMatrix(m)) gives m back.
std::string formatMatrix(const Matrix& matrix);
// The keys of the config file format, for --help: every [run] key with its type, default and the
// first line of its setting's help, and the [matrix] lists.
std::string experimentFileHelp();

}  // namespace gossamer::bench
