// net::relay::SecureStream: TLS 1.3 between two identity keys over bytes that a test carries
// from one end to the other, as a relay would. Both ends authenticate by the keys they expect;
// a third identity posing as one of them is refused; the carrier sees only ciphertext, and a
// byte it alters is caught.
#include "net/relay/secure_stream.h"

#include <algorithm>
#include <string>
#include <vector>

#include <asio/error.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"

namespace gossamer::net::relay {
namespace {

using wire::Identity;

std::vector<std::byte> bytesOf(const std::string& text) {
  const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  return {bytes.begin(), bytes.end()};
}

// Carries what each end has for the other until neither has more; `alter` may change the bytes
// on the way from a to b (the carrier in the middle). Returns when nothing moves.
template <typename Alter>
void carry(SecureStream& a, SecureStream& b, Alter alter) {
  for (int round = 0; round < 100; ++round) {
    std::vector<std::byte> ab = a.takeOutgoing();
    std::vector<std::byte> ba = b.takeOutgoing();
    if (ab.empty() && ba.empty()) return;
    alter(ab);
    if (!ab.empty()) (void)b.feed(ab);
    if (!ba.empty()) (void)a.feed(ba);
  }
  FAIL("the two ends kept talking");
}
void carry(SecureStream& a, SecureStream& b) {
  carry(a, b, [](std::vector<std::byte>&) {});
}

TEST_CASE("secure stream: two identities that expect each other talk, the carrier sees ciphertext") {
  const auto alice = Identity::generate();
  const auto bob = Identity::generate();
  SecureStream a(SecureStream::Role::client, *alice, bob->publicKey());
  SecureStream b(SecureStream::Role::server, *bob, alice->publicKey());
  // Written before the handshake: held, then sent.
  REQUIRE(!a.write(bytesOf("early words from a")));
  carry(a, b);
  REQUIRE(a.established());
  REQUIRE(b.established());
  CHECK(b.takeIncoming() == bytesOf("early words from a"));
  // A megabyte each way, in one piece and in many.
  std::vector<std::byte> big(1 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7 + 3);
  REQUIRE(!b.write(big));
  const std::string marker = "plaintext the carrier must not see";
  REQUIRE(!a.write(bytesOf(marker)));
  std::vector<std::byte> seen;
  carry(a, b, [&](std::vector<std::byte>& bytes) { seen.insert(seen.end(), bytes.begin(), bytes.end()); });
  CHECK(a.takeIncoming() == big);
  CHECK(b.takeIncoming() == bytesOf(marker));
  const auto needle = bytesOf(marker);
  CHECK(std::search(seen.begin(), seen.end(), needle.begin(), needle.end()) == seen.end());
  CHECK(!a.error());
  CHECK(!b.error());
  // A close reaches the other end as end of stream.
  a.close();
  carry(a, b);
  CHECK(b.error() == asio::error::eof);
}

TEST_CASE("secure stream: a third identity posing as the expected one is refused") {
  const auto alice = Identity::generate();
  const auto bob = Identity::generate();
  const auto mallory = Identity::generate();  // holds the cluster secret, not bob's key
  SUBCASE("posing as the server") {
    SecureStream a(SecureStream::Role::client, *alice, bob->publicKey());
    SecureStream m(SecureStream::Role::server, *mallory, alice->publicKey());
    REQUIRE(!a.write(bytesOf("for bob only")));
    carry(a, m);
    CHECK(a.error() == Errc::authenticationFailed);
    CHECK(a.reason().find("not the one bound") != std::string::npos);
    CHECK_FALSE(a.established());
    CHECK(m.takeIncoming().empty());
  }
  SUBCASE("posing as the client") {
    SecureStream m(SecureStream::Role::client, *mallory, bob->publicKey());
    SecureStream b(SecureStream::Role::server, *bob, alice->publicKey());
    carry(m, b);
    CHECK(b.error() == Errc::authenticationFailed);
    CHECK_FALSE(b.established());
    CHECK(b.write(bytesOf("for alice only")) == Errc::authenticationFailed);
  }
}

TEST_CASE("secure stream: an altered byte is caught, and bytes that are not TLS are refused") {
  const auto alice = Identity::generate();
  const auto bob = Identity::generate();
  SecureStream a(SecureStream::Role::client, *alice, bob->publicKey());
  SecureStream b(SecureStream::Role::server, *bob, alice->publicKey());
  carry(a, b);
  REQUIRE(b.established());
  REQUIRE(!a.write(bytesOf("pay 10 to carol")));
  carry(a, b, [](std::vector<std::byte>& bytes) {
    if (!bytes.empty()) bytes[bytes.size() - 3] ^= std::byte{0x20};
  });
  CHECK(b.error() == Errc::tlsRecordRejected);
  CHECK(b.takeIncoming().empty());
  CHECK(b.feed(bytesOf("more")) == Errc::tlsRecordRejected);  // dead from then on

  SecureStream c(SecureStream::Role::server, *bob, alice->publicKey());
  CHECK(c.feed(bytesOf("GET / HTTP/1.1\r\n\r\n")) == Errc::authenticationFailed);
}

}  // namespace
}  // namespace gossamer::net::relay
