// The conformance suite for net::Transport / net::Link: one set of cases, defined once (in the
// headers below) and instantiated per backend by the test file of each backend with
// GOSSAMER_TRANSPORT_CONFORMANCE(BackendA, BackendB, ...) at global scope (tcp, inproc and shaped
// in transport_conformance_test.cc; ibverbs in ibverbs_transport_test.cc, which alone knows whether
// this build has it). Every case runs two peers, each with its own io_context on its own thread (so
// inproc's cross-thread hand-offs are exercised too), binds port 0 on 127.0.0.1, and runs under a
// Watchdog that aborts the binary with a clear message if the case hangs. Payload bytes come from a
// seeded pattern, so a receiver checks them without a second copy.
//
// A backend is a tag type with
//   static constexpr bool kRawTcpListener;  // a plain TCP socket can talk the tcp wire format to
//                                           // its listener (cases that write broken frames)
//   static std::unique_ptr<Transport> make(asio::io_context&, Fixture&);
// and optionally
//   static bool available(std::string* reason);  // false: every case is skipped with a MESSAGE
// (a backend that needs hardware this machine lacks).
//
// The suite lives in three headers, all included here: transport_conformance_harness.h (the
// peers, the payload pattern, raw tcp frames), transport_conformance_delivery.h (order, size,
// many links, payload targets) and transport_conformance_failures.h (limits, back-pressure,
// disconnects, dead addresses, close).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/inproc/inproc_transport.h"
#include "net/transport.h"
#include "tests/net/transport_conformance_delivery.h"
#include "tests/net/transport_conformance_failures.h"
#include "tests/net/transport_conformance_harness.h"
#include "tests/support/io_thread.h"
#include "tests/support/watchdog.h"

// Registers every case of the suite for each backend tag given.
#define GOSSAMER_TRANSPORT_CONFORMANCE(...)                           \
  namespace gossamer::net::conformance {                              \
  TEST_CASE_TEMPLATE_INVOKE(conformance_order, __VA_ARGS__);          \
  TEST_CASE_TEMPLATE_INVOKE(conformance_large, __VA_ARGS__);          \
  TEST_CASE_TEMPLATE_INVOKE(conformance_header_only, __VA_ARGS__);    \
  TEST_CASE_TEMPLATE_INVOKE(conformance_eight_links, __VA_ARGS__);    \
  TEST_CASE_TEMPLATE_INVOKE(conformance_payload_target, __VA_ARGS__); \
  TEST_CASE_TEMPLATE_INVOKE(conformance_limits, __VA_ARGS__);         \
  TEST_CASE_TEMPLATE_INVOKE(conformance_back_pressure, __VA_ARGS__);  \
  TEST_CASE_TEMPLATE_INVOKE(conformance_disconnect, __VA_ARGS__);     \
  TEST_CASE_TEMPLATE_INVOKE(conformance_dead_address, __VA_ARGS__);   \
  TEST_CASE_TEMPLATE_INVOKE(conformance_close, __VA_ARGS__);          \
  }                                                                   \
  static_assert(true, "")
