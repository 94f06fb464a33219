// The wire records of the RDMA transport (net/ibverbs/protocol.h) on their own: the bootstrap
// record, the credits in the immediate, and a frame's meta checked against the limits before
// anything is allocated (only in a build with the ibverbs backend).
#include <doctest/doctest.h>

#include "engine/base/config.h"

#if GOSSAMER_HAVE_IBVERBS

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "net/errors.h"
#include "net/frame.h"
#include "net/ibverbs/protocol.h"
#include "net/limits.h"
#include "tests/net/transport_conformance.h"

namespace gossamer::net::ibverbs {
namespace {

using conformance::headerOf;

TEST_CASE("net ibverbs protocol: bootstrap records round-trip and hostile values are refused") {
  protocol::BootstrapInfo info{.qpn = 0x123456,
                               .psn = 0xabcdef,
                               .lid = 7,
                               .gid = {0xfe, 0x80, 1, 2, 3},
                               .useGid = true,
                               .mtu = 4096,
                               .slotAddress = 0x7f0000001000,
                               .slotRkey = 0xdeadbeef,
                               .slotCount = 16,
                               .slotBytes = 256 * 1024,
                               .dataWindow = 32,
                               .creditWindow = 16,
                               .receiveBytes = 4096};
  const auto bytes = protocol::encodeBootstrap(info);
  protocol::BootstrapInfo got;
  REQUIRE(!protocol::decodeBootstrap(bytes, &got));
  CHECK(got.qpn == info.qpn);
  CHECK(got.psn == info.psn);
  CHECK(got.lid == 7);
  CHECK(got.gid == info.gid);
  CHECK(got.useGid);
  CHECK(got.slotAddress == info.slotAddress);
  CHECK(got.slotRkey == info.slotRkey);
  CHECK(got.slotCount == 16);
  CHECK(got.slotBytes == 256 * 1024);
  CHECK(got.dataWindow == 32);
  CHECK(got.creditWindow == 16);
  CHECK(got.receiveBytes == 4096);

  auto refused = [&](auto mutate, std::error_code expected) {
    protocol::BootstrapInfo bad = info;
    mutate(bad);
    const auto encoded = protocol::encodeBootstrap(bad);
    protocol::BootstrapInfo ignored;
    return protocol::decodeBootstrap(encoded, &ignored) == expected;
  };
  const std::error_code malformed = Errc::malformedFrame;
  CHECK(refused([](auto& i) { i.slotCount = 0; }, malformed));
  CHECK(refused([](auto& i) { i.slotCount = protocol::kMaxSlotCount + 1; }, malformed));
  CHECK(refused([](auto& i) { i.slotBytes = 100; }, malformed));
  CHECK(refused([](auto& i) { i.slotBytes = std::uint64_t{1} << 40; }, malformed));
  CHECK(refused([](auto& i) { i.slotAddress = ~std::uint64_t{0} - 10; }, malformed));
  CHECK(refused([](auto& i) { i.mtu = 1500; }, malformed));
  CHECK(refused([](auto& i) { i.dataWindow = 5000; }, malformed));
  CHECK(refused([](auto& i) { i.creditWindow = 0; }, malformed));
  CHECK(refused([](auto& i) { i.receiveBytes = 1u << 30; }, malformed));
  CHECK(refused([](auto& i) { i.qpn = 1u << 24; }, malformed));

  protocol::BootstrapInfo ignored;
  CHECK(protocol::decodeBootstrap(std::span(bytes).first(40), &ignored) == malformed);
  auto wrongVersion = bytes;
  wrongVersion[4] = std::byte{9};
  CHECK(protocol::decodeBootstrap(wrongVersion, &ignored) ==
        make_error_code(Errc::versionMismatch));
  auto wrongMagic = bytes;
  wrongMagic[0] = std::byte{0};
  CHECK(protocol::decodeBootstrap(wrongMagic, &ignored) == malformed);
}

TEST_CASE("net ibverbs protocol: credits in the immediate wrap around and never go backwards") {
  const std::uint32_t imm = protocol::packImm(5000, 4097, 300);
  const protocol::Credits credits = protocol::unpackImm(imm);
  CHECK(credits.dataFreed == 5000 % 4096);
  CHECK(credits.slotsFreed == 1);
  CHECK(credits.creditsFreed == 300 % 256);
  // Counters advance across the wrap of their bits...
  CHECK(protocol::advance(4090, protocol::unpackImm(protocol::packImm(4100, 0, 0)).dataFreed,
                          protocol::kDataBits) == 4100);
  CHECK(protocol::advance(250, 3, protocol::kCreditBits) == 259);
  // ... and a stale report leaves them where they are.
  CHECK(protocol::advance(4100, 4090 % 4096, protocol::kDataBits) == 4100);
  CHECK(protocol::advance(10, 10, protocol::kSlotBits) == 10);
}

TEST_CASE("net ibverbs protocol: a frame's meta is checked against the limits before allocation") {
  Limits limits;
  limits.maxPayloads = 4;
  limits.maxHeaderBytes = 100;
  limits.maxFrameBytes = 1 << 20;
  const std::vector<std::byte> header = headerOf({1, 2});
  const std::vector<std::byte> payload(1000);
  const std::vector<std::byte> meta = protocol::encodeMeta(OutFrame{header, {payload, {}}});
  protocol::MetaPrefix prefix;
  REQUIRE(!protocol::decodeMetaPrefix(meta, limits, &prefix));
  CHECK(prefix.headerBytes == 16);
  CHECK(prefix.payloadCount == 2);
  CHECK(prefix.metaBytes == meta.size());
  std::vector<std::uint64_t> sizes;
  REQUIRE(!protocol::decodeMetaSizes(meta, prefix, limits, &sizes));
  CHECK(sizes == std::vector<std::uint64_t>{1000, 0});

  auto prefixOf = [](std::uint32_t headerBytes, std::uint32_t count) {
    std::vector<std::byte> bytes(8);
    std::memcpy(bytes.data(), &headerBytes, 4);
    std::memcpy(bytes.data() + 4, &count, 4);
    return bytes;
  };
  CHECK(protocol::decodeMetaPrefix(prefixOf(16, 100'000), limits, &prefix) ==
        make_error_code(Errc::tooManyPayloads));
  CHECK(protocol::decodeMetaPrefix(prefixOf(0xffffffff, 1), limits, &prefix) ==
        make_error_code(Errc::frameTooLarge));
  CHECK(protocol::decodeMetaPrefix(std::span(meta).first(5), limits, &prefix) ==
        make_error_code(Errc::malformedFrame));
  // A claimed payload of 2^40 bytes is refused from its size alone.
  std::vector<std::byte> huge = prefixOf(0, 1);
  huge.resize(16);
  const std::uint64_t size = std::uint64_t{1} << 40;
  std::memcpy(huge.data() + 8, &size, 8);
  REQUIRE(!protocol::decodeMetaPrefix(huge, limits, &prefix));
  CHECK(protocol::decodeMetaSizes(huge, prefix, limits, &sizes) ==
        make_error_code(Errc::frameTooLarge));
}

}  // namespace
}  // namespace gossamer::net::ibverbs

#endif  // GOSSAMER_HAVE_IBVERBS
