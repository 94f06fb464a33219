// The transport conformance suite (transport_conformance.h) for the backends every build has:
// tcp (plaintext and over TLS 1.3 with a pre-shared key), inproc, the shaped decorator over
// tcp and over tcp with TLS, and the striped decorator (several connections per link) over both.
#include "tests/net/transport_conformance.h"

#include <memory>

#include <asio/io_context.hpp>
#include <doctest/doctest.h>

#include "net/inproc/inproc_transport.h"
#include "net/shaped/shaped_transport.h"
#include "net/striped/striped_transport.h"
#include "net/tcp/tcp_transport.h"
#include "net/tcp/tls.h"
#include "net/transport.h"
#include "tests/net/tls_support.h"

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

// tcp with TLS 1.3 (a PSK from a test secret). Not a raw listener: it speaks TLS.
struct TlsTcpBackend {
  static constexpr bool kRawTcpListener = false;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    tcp::Options options;
    options.limits = fixture.limits;
    options.tls = test::pskContext("conformance secret");
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

// The same over tcp with TLS: the shaped preface travels inside the tunnel.
struct ShapedTlsTcpBackend {
  static constexpr bool kRawTcpListener = false;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    return shaped::makeTransport(TlsTcpBackend::make(io, fixture), shaped::Options{});
  }
};

// The striped decorator: links of 4 tcp connections, frames of 128 KiB and more cut into chunks
// of at least 64 KiB, so that the suite's large frames are striped.
striped::Options stripedOptions(std::size_t streams) {
  striped::Options options;
  options.streams = streams;
  options.stripeBytes = std::size_t{64} << 10;
  return options;
}
struct StripedTcpBackend {
  static constexpr bool kRawTcpListener = false;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    return striped::makeTransport(TcpBackend::make(io, fixture), stripedOptions(4));
  }
};

// Three streams of the shaped decorator over tcp with TLS: each stream is its own TLS tunnel.
struct StripedShapedTlsBackend {
  static constexpr bool kRawTcpListener = false;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    return striped::makeTransport(ShapedTlsTcpBackend::make(io, fixture), stripedOptions(3));
  }
};

}  // namespace
}  // namespace gossamer::net

TYPE_TO_STRING_AS("TcpBackend", gossamer::net::TcpBackend);
TYPE_TO_STRING_AS("InprocBackend", gossamer::net::InprocBackend);
TYPE_TO_STRING_AS("ShapedTcpBackend", gossamer::net::ShapedTcpBackend);
TYPE_TO_STRING_AS("TlsTcpBackend", gossamer::net::TlsTcpBackend);
TYPE_TO_STRING_AS("ShapedTlsTcpBackend", gossamer::net::ShapedTlsTcpBackend);
TYPE_TO_STRING_AS("StripedTcpBackend", gossamer::net::StripedTcpBackend);
TYPE_TO_STRING_AS("StripedShapedTlsBackend", gossamer::net::StripedShapedTlsBackend);

GOSSAMER_TRANSPORT_CONFORMANCE(TcpBackend, TlsTcpBackend, InprocBackend, ShapedTcpBackend,
                               ShapedTlsTcpBackend, StripedTcpBackend, StripedShapedTlsBackend);
