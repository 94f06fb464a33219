// The RDMA devices: the fake of tests/net/fake_verbs.h on its own (its QP state machine), and
// device selection (isViable says why no device is usable, and the transport fails at start),
// only in a build with the ibverbs backend; and, in every build, that the benchmark refuses to
// run RDMA where it cannot, with the reason.
#include <string>

#include <doctest/doctest.h>

#include "engine/base/config.h"
#include "engine/builtin.h"
#include "tests/process_util.h"

#if GOSSAMER_HAVE_IBVERBS

#include <array>
#include <cstdint>
#include <memory>
#include <system_error>
#include <vector>

#include <asio/io_context.hpp>

#include "engine/base/enforce.h"
#include "net/ibverbs/ibverbs_transport.h"
#include "net/ibverbs/verbs.h"
#include "tests/net/fake_verbs.h"

namespace gossamer::net::ibverbs {
namespace {

using fake::FakeFabric;
using fake::HostOptions;

TEST_CASE("net ibverbs fake verbs: the QP state machine rejects illegal transitions") {
  auto fabric = std::make_shared<FakeFabric>();
  std::shared_ptr<Verbs> verbs = fabric->makeHost();
  std::vector<std::string> names;
  REQUIRE(!verbs->deviceNames(&names));
  REQUIRE(names == std::vector<std::string>{"fake0"});
  ContextHandle context;
  PdHandle pd;
  CqHandle cq;
  QpHandle qp;
  std::uint32_t qpn = 0;
  REQUIRE(!verbs->open("fake0", &context));
  REQUIRE(!verbs->allocPd(context, &pd));
  REQUIRE(!verbs->createCq(context, 16, ChannelHandle{}, &cq));
  REQUIRE(!verbs->createQp(pd, cq, QpCapabilities{.maxSendWr = 4, .maxRecvWr = 4}, &qp, &qpn));
  const std::error_code invalid = std::make_error_code(std::errc::invalid_argument);
  auto to = [&](QpState state) {
    QpTransition transition;
    transition.target = state;
    transition.remoteQpn = qpn;
    transition.remoteLid = 1;
    return verbs->modifyQp(qp, transition);
  };
  const std::array<Sge, 0> none{};
  const SendRequest send{.wrId = 1, .opcode = SendOpcode::kSendWithImm, .sges = none};
  CHECK(to(QpState::kReadyToReceive) == invalid);  // RESET -> RTR
  CHECK(to(QpState::kReadyToSend) == invalid);     // RESET -> RTS
  CHECK(verbs->postSend(qp, send) == invalid);     // not ready to send
  CHECK(!to(QpState::kInit));
  CHECK(to(QpState::kReadyToSend) == invalid);  // INIT -> RTS
  CHECK(verbs->postSend(qp, send) == invalid);
  CHECK(!to(QpState::kReadyToReceive));
  CHECK(to(QpState::kInit) == invalid);  // RTR -> INIT
  CHECK(verbs->postSend(qp, send) == invalid);
  CHECK(!to(QpState::kReadyToSend));
  CHECK(!to(QpState::kError));
  CHECK(to(QpState::kReadyToSend) == invalid);  // ERROR -> RTS
  CHECK(!to(QpState::kReset));
  CHECK(!to(QpState::kInit));
  const std::vector<std::vector<QpState>> histories = fabric->qpHistories("fake0");
  REQUIRE(histories.size() == 1);
  CHECK(histories[0] == std::vector<QpState>{QpState::kReset, QpState::kInit,
                                             QpState::kReadyToReceive, QpState::kReadyToSend,
                                             QpState::kError, QpState::kReset, QpState::kInit});
  verbs->destroyQp(qp);
  verbs->destroyCq(cq);
  verbs->deallocPd(pd);
  verbs->close(context);
  CHECK(fabric->live() == fake::LiveCounts{});
  CHECK(fabric->violations().empty());
}

TEST_CASE(
    "net ibverbs: without a usable device isViable says why and the transport fails at start") {
  auto fabric = std::make_shared<FakeFabric>();
  asio::io_context io;
  std::string reason;

  Options none;
  none.verbs = fabric->makeHost(HostOptions{.hasDevice = false});
  CHECK(!isViable(&reason, none));
  CHECK_MESSAGE(reason.find("no RDMA device") != std::string::npos, reason);
  CHECK_THROWS_WITH_AS(makeTransport(io, none), doctest::Contains("no RDMA device"),
                       gossamer::Error);

  Options named;
  named.verbs = fabric->makeHost();  // "fake1"
  named.device = "mlx5_9";
  CHECK(!isViable(&reason, named));
  CHECK_MESSAGE(reason.find("'mlx5_9' not found (present: fake1)") != std::string::npos, reason);
  CHECK_THROWS_WITH_AS(makeTransport(io, named), doctest::Contains("mlx5_9"), gossamer::Error);

  Options down;
  down.verbs = fabric->makeHost(HostOptions{.portActive = false});  // "fake2"
  CHECK(!isViable(&reason, down));
  CHECK_MESSAGE(reason.find("port 1 of RDMA device 'fake2' is not active") != std::string::npos,
                reason);
  down.port = 2;
  CHECK(!isViable(&reason, down));
  CHECK_MESSAGE(reason.find("has no port 2") != std::string::npos, reason);

  Options fine;
  fine.verbs = fabric->makeHost();
  CHECK(isViable(&reason, fine));
  CHECK(reason.empty());
  CHECK(fabric->live() == fake::LiveCounts{});  // isViable closed what it opened

  // This machine's real devices: either usable, or a reason that says what is missing.
  const bool real = isViable(&reason);
  MESSAGE("real RDMA device here: " << (real ? "yes" : reason));
  if (!real) {
    CHECK(!reason.empty());
    CHECK_THROWS_AS(makeTransport(io, Options{}), gossamer::Error);
  }
}

}  // namespace
}  // namespace gossamer::net::ibverbs

#endif  // GOSSAMER_HAVE_IBVERBS

TEST_CASE(
    "net ibverbs: gossamer-bench transport --transport ibverbs stops at once where it cannot run") {
  std::string reason;
  if (gossamer::engine::makeBuiltinRegistry().transports.get("ibverbs").viable({}, &reason)) {
    MESSAGE("skipped: this machine has a usable RDMA device");
    return;
  }
  const gossamer::test::ProcessResult result = gossamer::test::runCommand(
      std::string(GOSSAMER_BENCH_BINARY) + " transport --transport ibverbs", 60);
  CHECK(result.exitCode == 1);
  CHECK_MESSAGE(result.output.find(reason) != std::string::npos, result.output);
  MESSAGE(result.output);
}
