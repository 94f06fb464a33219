// The Python module `gossamer` (its native part, gossamer._gossamer): peers of the externally
// driven loop (engine/runtime/peer.h), networked or in one process, with their flat params and
// grads shared with NumPy (and through it with torch) without copies. The Python package
// (engine/python/gossamer/) wraps this in the documented API.
//
// Threads and the GIL: every call that may wait on the network (constructing a peer, start, step,
// finish, kill) releases the GIL; the caller's callbacks (gradients, update, evaluate) take it
// back while they run, on the thread that called step() or finish().
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "algorithms/builtin.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/peer_settings.h"
#include "engine/runtime/cluster.h"
#include "engine/runtime/peer.h"
#include "net/wire/handshake.h"

namespace py = pybind11;

namespace gossamer::python {
namespace {

using engine::runtime::Peer;
using engine::runtime::PeerConfig;

const engine::Registry& registry() {
  static const engine::Registry r = algorithms::makeRegistry();
  return r;
}

const std::vector<engine::cli::Setting>& settings() {
  static const std::vector<engine::cli::Setting> s = engine::cli::peerSettings(registry());
  return s;
}

// An algorithm option's value as text.
std::string text(const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? "true" : "false";
  return py::str(value).cast<std::string>();
}

// A keyword argument's value as its setting's text: a list or tuple comma-separated, a bool
// true/false (on/off for an on/off setting).
std::string settingText(const engine::cli::Setting& s, const py::handle& value) {
  if (py::isinstance<py::bool_>(value) && s.allowed == std::vector<std::string>{"on", "off"})
    return value.cast<bool>() ? "on" : "off";
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    std::string out;
    for (const py::handle item : value) out += (out.empty() ? "" : ",") + text(item);
    return out;
  }
  return text(value);
}

// The peer's configuration from the keyword arguments of gossamer.Peer (engine/python/gossamer/
// __init__.py; the settings of engine/peer_settings.h bound to Python): an unknown key is refused
// with the closest known one.
PeerConfig peerConfig(const py::dict& o) {
  const std::vector<std::string> keywords = engine::cli::pythonKeywords(settings());
  for (const auto& [key, value] : o) {
    const std::string name = py::str(key).cast<std::string>();
    GOSSAMER_ENFORCE(std::find(keywords.begin(), keywords.end(), name) != keywords.end(),
                     "unknown option '{}'; did you mean '{}'?", name,
                     engine::closestName(name, keywords));
  }
  auto get = [&](const std::string& key) -> std::optional<py::object> {
    if (!o.contains(key) || o[key.c_str()].is_none()) return std::nullopt;
    return py::reinterpret_borrow<py::object>(o[key.c_str()]);
  };
  PeerConfig c;
  engine::runtime::TrainingConfig& t = c.training;
  // The secret first: a secret_file given too replaces it.
  if (auto v = get("secret")) {
    const std::string bytes = py::isinstance<py::bytes>(*v)
                                  ? v->cast<py::bytes>().cast<std::string>()
                                  : v->cast<std::string>();
    GOSSAMER_ENFORCE(!bytes.empty(), "the secret must not be empty");
    for (char ch : bytes) c.network.secret.push_back(static_cast<std::byte>(ch));
  }
  for (const engine::cli::Setting& s : settings())
    if (s.apply)
      if (auto v = get(s.python))
        engine::cli::applyPythonSetting(settings(), c, s.python, settingText(s, *v));
  registry().algorithms.get(t.algorithm);  // an unknown name lists the known ones
  if (auto v = get("algorithm_options"))
    for (const auto& [key, value] : v->cast<py::dict>()) {
      std::string name = py::str(key).cast<std::string>();
      // "gosgd.p" and "p" both name gosgd's option p.
      if (name.rfind(t.algorithm + ".", 0) == 0) name = name.substr(t.algorithm.size() + 1);
      t.algorithmOptions[name] = text(value);
    }
  return c;
}

// A float32 NumPy array over `data`, kept alive by `owner` (no copy).
py::array view(std::span<float> data, py::handle owner) {
  return py::array_t<float>({static_cast<py::ssize_t>(data.size())}, {sizeof(float)}, data.data(),
                            owner);
}

py::dict eventDict(const net::membership::Event& e) {
  py::dict d;
  d["kind"] = net::membership::name(e.kind);
  d["peer"] = e.member.id;
  d["address"] = e.member.address.str();
  d["epoch"] = e.epoch;
  return d;
}

py::dict resultDict(const engine::runtime::PeerResult& r) {
  py::dict d;
  d["peer"] = r.peer;
  d["algorithm"] = r.algorithm;
  d["topology"] = r.topology;
  d["peers"] = r.peers;
  d["parameters"] = r.parameters;
  d["steps"] = r.steps;
  d["samples"] = r.samples;
  d["epochs"] = r.epochs;
  d["wall_seconds"] = r.wallSeconds;
  d["finish_seconds"] = r.finishSeconds;
  d["samples_per_second"] = r.samplesPerSecond;
  d["train_loss"] = r.trainLoss;
  d["test_accuracy"] = r.testAccuracy;
  d["test_loss"] = r.testLoss;
  d["bytes_sent"] = r.bytesSent;
  d["bytes_received"] = r.bytesReceived;
  d["comm_wait_seconds"] = r.commWaitSeconds;
  d["comm_wait_fraction"] = r.commWaitFraction;
  d["compute_seconds"] = r.computeSeconds;
  d["utilization"] = r.utilization;
  d["peak_bytes"] = r.peakBytes;
  d["peak_memory_vs_model"] =
      r.parameters > 0 ? static_cast<double>(r.peakBytes) / static_cast<double>(r.modelBytes())
                       : 0.0;
  d["stopped"] = r.stopped;
  d["metrics"] = r.metrics;
  if (r.consensus) {
    py::dict c;
    c["peers"] = r.consensus->peers;
    c["accuracy"] = r.consensus->accuracy;
    c["loss"] = r.consensus->loss;
    c["distance"] = r.consensus->distance;
    c["min_peer_accuracy"] = r.consensus->minPeerAccuracy;
    c["mean_peer_accuracy"] = r.consensus->meanPeerAccuracy;
    d["consensus"] = c;
  } else {
    d["consensus"] = py::none();
  }
  d["join_failure"] = r.joinFailure ? py::object(py::str(r.joinFailure->describe())) : py::none();
  d["cluster_done"] = r.clusterDone;
  d["stalled"] = r.stalled ? py::object(py::str(*r.stalled)) : py::none();
  return d;
}

// "cpu" or "cuda:N" (the place of a caller's buffers).
kernels::MemoryPlace placeNamed(const std::string& device, std::uintptr_t stream) {
  kernels::MemoryPlace place;
  place.stream = reinterpret_cast<void*>(stream);
  if (device == "cpu") return place;
  GOSSAMER_ENFORCE(device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
                       device.find_first_not_of("0123456789", 5) == std::string::npos,
                   "buffers' device '{}' is neither 'cpu' nor 'cuda:N'", device);
  place.device = kernels::Device::kCuda;
  place.index = std::stoi(device.substr(5));
  return place;
}

// gossamer.Buffers as the runtime takes them: (params, grads, count, device, stream).
std::optional<engine::runtime::CallerBuffers> callerBuffers(const py::object& buffers) {
  if (buffers.is_none()) return std::nullopt;
  const auto t = buffers.cast<py::tuple>();
  GOSSAMER_ENFORCE(t.size() == 5, "buffers are (params, grads, count, device, stream)");
  return engine::runtime::CallerBuffers{
      .params = reinterpret_cast<float*>(t[0].cast<std::uintptr_t>()),
      .grads = reinterpret_cast<float*>(t[1].cast<std::uintptr_t>()),
      .count = t[2].cast<std::size_t>(),
      .place = placeNamed(t[3].cast<std::string>(), t[4].cast<std::uintptr_t>())};
}

// One peer of the externally driven loop, as Python sees it.
class PyPeer {
 public:
  // `layout`: (name, shape) per tensor, in order; `evaluate(params, samples)` returns
  // (correct, samples, loss_sum) or None for no evaluations; `buffers`: the caller's (a tuple,
  // callerBuffers) or None.
  PyPeer(const PeerConfig& config,
         const std::vector<std::pair<std::string, std::vector<std::size_t>>>& layout,
         py::object evaluate, std::uint64_t stepsPerEpoch, const py::object& buffers) {
    engine::runtime::ExternalModel model;
    model.buffers = callerBuffers(buffers);
    onDevice_ = model.buffers && model.buffers->place.device != kernels::Device::kCpu;
    const float* const ownParams = model.buffers ? model.buffers->params : nullptr;
    for (const auto& [name, shape] : layout) {
      GOSSAMER_ENFORCE(!shape.empty(), "tensor '{}' has no shape", name);
      model.layout.add(name, shape);
    }
    model.stepsPerEpoch = stepsPerEpoch;
    if (!evaluate.is_none()) {
      GOSSAMER_ENFORCE(PyCallable_Check(evaluate.ptr()), "evaluate must be callable");
      evaluate_ = std::make_shared<py::object>(std::move(evaluate));
      model.evaluate = [this, ownParams](std::span<const float> params, std::size_t samples) {
        py::gil_scoped_acquire gil;
        // A view for the length of the call: the peer's buffer (or the consensus's); the address
        // of the caller's own device buffer, which the host cannot read.
        float* data = const_cast<float*>(params.data());
        py::object params_view =
            onDevice_ && data == ownParams
                ? py::object(py::int_(reinterpret_cast<std::uintptr_t>(data)))
                : py::object(view(std::span<float>(data, params.size()),
                                  py::capsule(data, [](void*) {})));
        const py::tuple got = (*evaluate_)(params_view, samples).cast<py::tuple>();
        GOSSAMER_ENFORCE(got.size() == 3,
                         "evaluate must return (correct, samples, loss_sum), got {} values",
                         got.size());
        engine::EvalResult r;
        r.correct = got[0].cast<std::size_t>();
        r.samples = got[1].cast<std::size_t>();
        r.lossSum = got[2].cast<double>();
        return r;
      };
    }
    py::gil_scoped_release release;
    peer_ = std::make_unique<Peer>(config, registry(), std::move(model));
  }

  ~PyPeer() {
    py::gil_scoped_release release;
    peer_.reset();
  }

  Peer& peer() { return *peer_; }

  bool start() {
    py::gil_scoped_release release;
    return peer_->start();
  }

  bool step(double loss, std::size_t samples, py::object gradients, py::object update,
            std::optional<std::uintptr_t> stream) {
    engine::runtime::LocalStep local{.loss = loss, .samples = samples};
    if (stream) local.stream = reinterpret_cast<void*>(*stream);
    if (!gradients.is_none()) {
      GOSSAMER_ENFORCE(PyCallable_Check(gradients.ptr()), "gradients must be callable");
      local.gradients = [&gradients] {
        py::gil_scoped_acquire gil;
        return gradients().cast<double>();
      };
    }
    if (!update.is_none()) {
      GOSSAMER_ENFORCE(PyCallable_Check(update.ptr()), "update must be callable");
      local.update = [&update] {
        py::gil_scoped_acquire gil;
        update();
      };
    }
    py::gil_scoped_release release;
    return peer_->step(local);
  }

  py::dict finish() {
    engine::runtime::PeerResult result;
    {
      py::gil_scoped_release release;
      result = peer_->finish();
    }
    return resultDict(result);
  }

  void kill() {
    py::gil_scoped_release release;
    peer_->kill();
  }

  // A NumPy view of one of the peer's buffers; device memory is refused (the host cannot read it).
  py::array buffer(std::span<float> data, py::handle owner, const char* what) const {
    GOSSAMER_ENFORCE(!onDevice_,
                     "the {} are the caller's device memory: read them through the framework "
                     "that owns them (gossamer.torch: the module's tensors)",
                     what);
    return view(data, owner);
  }

 private:
  bool onDevice_ = false;  // the caller's buffers are device memory
  std::shared_ptr<py::object> evaluate_;
  std::unique_ptr<Peer> peer_;
};

// The configurations of `count` peers of one process: one transport maker (one inproc hub),
// one secret, ids 1..count; peer 0 starts the cluster, the others name it as their seed.
class PyLocalConfigs {
 public:
  explicit PyLocalConfigs(const py::dict& options)
      : configs_(
            [&] {
              PeerConfig base = peerConfig(options);
              if (!options.contains("transport")) base.network.transport = "inproc";
              return base;
            }(),
            registry()) {}
  PeerConfig make(std::size_t index, std::optional<std::string> seed) const {
    return configs_.make(index, seed ? std::optional(net::Endpoint::parse(*seed)) : std::nullopt);
  }
  void listening(const std::string& endpoint, std::size_t index) {
    configs_.listening(net::Endpoint::parse(endpoint), index);
  }

 private:
  engine::runtime::LocalPeerConfigs configs_;
};

}  // namespace
}  // namespace gossamer::python

using namespace gossamer;
using namespace gossamer::python;

PYBIND11_MODULE(_gossamer, m) {
  m.doc() = "gossamer's native part; use the gossamer package";
  py::register_exception<gossamer::Error>(m, "Error", PyExc_ValueError);

  m.def("algorithms", [] {
    py::dict out;
    for (const std::string& name : registry().algorithms.names()) {
      const engine::AlgorithmSpec& spec = registry().algorithms.get(name);
      py::dict options;
      for (const engine::OptionInfo& o : spec.options)
        options[py::str(o.name)] = py::make_tuple(o.defaultValue, o.help);
      out[py::str(name)] =
          py::dict(py::arg("description") = spec.description,
                   py::arg("topology") = spec.defaultTopology, py::arg("options") = options);
    }
    return out;
  });
  m.def("topologies", [] { return registry().topologies.names(); });
  // The keyword arguments of Peer and local_cluster: name -> help.
  m.def("options", [] {
    py::dict out;
    out["algorithm_options"] = "dict of the algorithm's options, e.g. {'p': 0.1}";
    out["secret"] = "the cluster secret (bytes or str); every peer needs the same one";
    for (const engine::cli::Setting& s : settings())
      if (s.apply) out[py::str(s.python)] = s.pythonHelp.empty() ? s.help : s.pythonHelp;
    return out;
  });
  m.def(
      "closest_option",
      [](const std::string& name) {
        return engine::closestName(name, engine::cli::pythonKeywords(settings()));
      },
      py::arg("name"), "The keyword argument nearest to `name` (for an error message).");
  m.def("set_log_level", &log::setLevel, py::arg("level"),
        "Level of gossamer's logs on stderr: trace, debug, info, warn, error, critical or off.");

  py::class_<PyLocalConfigs>(m, "_LocalConfigs")
      .def(py::init<const py::dict&>())
      .def("make",
           [](const PyLocalConfigs& c, std::size_t index, std::optional<std::string> seed,
              py::list layout, py::object evaluate, std::uint64_t stepsPerEpoch,
              py::object buffers) {
             return std::make_unique<PyPeer>(
                 c.make(index, seed),
                 layout.cast<std::vector<std::pair<std::string, std::vector<std::size_t>>>>(),
                 std::move(evaluate), stepsPerEpoch, buffers);
           })
      .def("listening", &PyLocalConfigs::listening);

  py::class_<PyPeer>(m, "_Peer")
      .def(py::init([](const py::dict& options, py::list layout, py::object evaluate,
                       std::uint64_t stepsPerEpoch, py::object buffers) {
        return std::make_unique<PyPeer>(
            peerConfig(options),
            layout.cast<std::vector<std::pair<std::string, std::vector<std::size_t>>>>(),
            std::move(evaluate), stepsPerEpoch, buffers);
      }))
      .def("start", &PyPeer::start)
      .def("step", &PyPeer::step, py::arg("loss"), py::arg("samples"), py::arg("gradients"),
           py::arg("update"), py::arg("stream"))
      .def("finish", &PyPeer::finish)
      .def("kill", &PyPeer::kill)
      .def("request_stop", [](PyPeer& p) { p.peer().requestStop(); })
      .def("request_leave", [](PyPeer& p) { p.peer().requestLeave(); })
      .def_property_readonly(
          "params",
          [](py::object self) {
            PyPeer& p = self.cast<PyPeer&>();
            return p.buffer(p.peer().params(), self, "params");
          })
      .def_property_readonly("grads",
                             [](py::object self) {
                               PyPeer& p = self.cast<PyPeer&>();
                               return p.buffer(p.peer().grads(), self, "grads");
                             })
      .def_property_readonly("id", [](PyPeer& p) { return p.peer().id(); })
      .def_property_readonly("endpoint", [](PyPeer& p) { return p.peer().endpoint().str(); })
      .def_property_readonly("shard",
                             [](PyPeer& p) {
                               const engine::runtime::DataShard s = p.peer().shard();
                               return py::make_tuple(s.index, s.count);
                             })
      .def("members",
           [](PyPeer& p) {
             py::list out;
             for (const net::membership::Member& m : p.peer().view().members)
               out.append(py::dict(py::arg("peer") = m.id, py::arg("address") = m.address.str(),
                                   py::arg("state") = net::membership::name(m.state)));
             return out;
           })
      .def("events",
           [](PyPeer& p) {
             py::list out;
             for (const net::membership::Event& e : p.peer().takeEvents()) out.append(eventDict(e));
             return out;
           })
      .def("status", [](PyPeer& p) {
        const engine::runtime::PeerStatus s = p.peer().status();
        py::dict d;
        d["step"] = s.step;
        d["total_steps"] = s.totalSteps;
        d["loss"] = s.loss;
        d["bytes_sent"] = s.bytesSent;
        d["bytes_received"] = s.bytesReceived;
        d["comm_wait_seconds"] = s.commWaitSeconds;
        d["compute_seconds"] = s.computeSeconds;
        d["train_seconds"] = s.trainSeconds;
        // As of the last step, taken together (their ratios hold).
        d["last_step"] = py::dict(py::arg("train_seconds") = s.lastStep.trainSeconds,
                                  py::arg("comm_wait_seconds") = s.lastStep.commWaitSeconds,
                                  py::arg("compute_seconds") = s.lastStep.computeSeconds);
        d["training"] = s.training;
        d["finished"] = s.finished;
        d["waiting_for"] = s.waitingFor;
        return d;
      });
}
