// Endpoint::parse / str: the "HOST:PORT" text of listen and connect addresses.
#include "net/endpoint.h"

#include <string>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"

namespace gossamer::net {
namespace {

TEST_CASE("endpoint: parses an ipv4 address and port and prints it back") {
  const Endpoint endpoint = Endpoint::parse("127.0.0.1:7000");
  CHECK(endpoint.host == "127.0.0.1");
  CHECK(endpoint.port == 7000);
  CHECK(endpoint.str() == "127.0.0.1:7000");
  CHECK(Endpoint::parse(endpoint.str()) == endpoint);
}

TEST_CASE("endpoint: parses a bracketed ipv6 address and prints the brackets back") {
  const Endpoint endpoint = Endpoint::parse("[::1]:65535");
  CHECK(endpoint.host == "::1");
  CHECK(endpoint.port == 65535);
  CHECK(endpoint.str() == "[::1]:65535");
  CHECK(Endpoint::parse(endpoint.str()) == endpoint);
}

TEST_CASE("endpoint: parses a host name and port 0") {
  const Endpoint endpoint = Endpoint::parse("localhost:0");
  CHECK(endpoint.host == "localhost");
  CHECK(endpoint.port == 0);
  CHECK(endpoint.str() == "localhost:0");
}

TEST_CASE("endpoint: orders and compares by host then port") {
  CHECK(Endpoint{"a", 2} < Endpoint{"b", 1});
  CHECK(Endpoint{"a", 1} < Endpoint{"a", 2});
  CHECK(Endpoint{"a", 1} != Endpoint{"a", 2});
}

TEST_CASE("endpoint: a missing port is an error that quotes the text") {
  CHECK_THROWS_WITH_AS(Endpoint::parse("127.0.0.1"), doctest::Contains("127.0.0.1"),
                       gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("127.0.0.1:"), gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("[::1]"), gossamer::Error);
}

TEST_CASE("endpoint: an empty host is an error") {
  CHECK_THROWS_AS(Endpoint::parse(":7000"), gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("[]:7000"), gossamer::Error);
}

TEST_CASE("endpoint: a bad port is an error") {
  CHECK_THROWS_WITH_AS(Endpoint::parse("host:65536"), doctest::Contains("65536"), gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("host:-1"), gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("host:12ab"), gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("host:+80"), gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("host: 80"), gossamer::Error);
  CHECK_THROWS_AS(Endpoint::parse("host:99999999999999999999"), gossamer::Error);
}

}  // namespace
}  // namespace gossamer::net
