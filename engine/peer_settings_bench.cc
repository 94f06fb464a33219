// The run-level settings only gossamer-bench's front ends take (peer_settings.h): how an
// experiment is evaluated and what it is compared with. No gossamer-peer flag sets them; their
// values live in the benchmarks' options structs (bench/convergence_config.h RunSettings).
#include "engine/peer_settings.h"
#include "engine/peer_settings_declare.h"

namespace gossamer::engine::cli::declaring {

void addBenchSettings(std::vector<Setting>& out) {
  const std::string group = "Benchmarks";
  Declare<double>(out, "max-seconds", "wall-clock budget of one experiment (training stops then)",
                  group)
      .above(0)
      .bench(kRun);
  Declare<std::uint64_t>(out, "eval-every-steps",
                         "steps between the evaluation points: every peer's model at exactly "
                         "every this many steps (simulate: instead of --eval-seconds; 0: none)",
                         group)
      .bench(kSimulate | kRun);
  Declare<double>(out, "eval-seconds",
                  "seconds between consensus evaluations, at whatever step each peer is then "
                  "(coarse; convergence: instead of evaluation points, 0: points; simulate: "
                  "virtual seconds)",
                  group)
      .atLeast(0)
      .bench(kSimulate | kRun);
  Declare<double>(out, "target", "consensus accuracy of the time-to-target figures", group)
      .above(0)
      .atMost(1)
      .bench(kSimulate | kRun);
  Declare<double>(out, "target-loss",
                  "consensus test loss of the time-to-target-loss figures (0: none)", group)
      .atLeast(0)
      .bench(kRun);
  Declare<std::string>(out, "baseline",
                       "the algorithm speed-ups and byte ratios compare with (same network, "
                       "peers, split and step time)",
                       group)
      .valid([](const std::string& v) {
        GOSSAMER_ENFORCE(!v.empty(), "the baseline names an algorithm of the matrix");
      })
      .bench(kRun);
}

}  // namespace gossamer::engine::cli::declaring
