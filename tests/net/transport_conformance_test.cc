// The transport conformance suite (transport_conformance.h) for the backends every build has:
// tcp, inproc, and the shaped decorator over tcp.
#include "tests/net/transport_conformance.h"

#include <memory>

#include <asio/io_context.hpp>
#include <doctest/doctest.h>

#include "net/inproc/inproc_transport.h"
#include "net/shaped/shaped_transport.h"
#include "net/tcp/tcp_transport.h"
#include "net/transport.h"

namespace gossamer::net {
namespace {

using conformance::Fixture;

// Backend tags. kRawTcpListener: a plain TCP socket can talk to the transport's listener in the
// tcp wire format (cases that write hand-made, broken or truncated frames).
struct TcpBackend {
  static constexpr bool kRawTcpListener = true;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    tcp::Options options;
    options.limits = fixture.limits;
    return tcp::makeTransport(io, options);
  }
};

struct InprocBackend {
  static constexpr bool kRawTcpListener = false;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    return inproc::makeTransport(io, fixture.hub, inproc::Options{fixture.limits});
  }
};

// The shaped decorator over tcp with the `lan` profile (no shaping: frames pass straight
// through). Not a raw listener: a shaped accept expects the shaped connector's preface first.
struct ShapedTcpBackend {
  static constexpr bool kRawTcpListener = false;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    tcp::Options options;
    options.limits = fixture.limits;
    return shaped::makeTransport(tcp::makeTransport(io, options), shaped::Options{});
  }
};

}  // namespace
}  // namespace gossamer::net

TYPE_TO_STRING_AS("TcpBackend", gossamer::net::TcpBackend);
TYPE_TO_STRING_AS("InprocBackend", gossamer::net::InprocBackend);
TYPE_TO_STRING_AS("ShapedTcpBackend", gossamer::net::ShapedTcpBackend);

GOSSAMER_TRANSPORT_CONFORMANCE(TcpBackend, InprocBackend, ShapedTcpBackend);
