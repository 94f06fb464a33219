// Where a peer listens: "host:port" for TCP, "inproc:NAME" style hosts for in-process peers.
#pragma once

#include <cstdint>
#include <string>

namespace gossamer::net {

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;

  // "127.0.0.1:7000", "[::1]:7000", "localhost:0". Throws gossamer::Error with the text and what
  // is wrong (no port, port out of range, empty host).
  static Endpoint parse(const std::string& text);
  std::string str() const;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
  friend auto operator<=>(const Endpoint&, const Endpoint&) = default;
};

}  // namespace gossamer::net
