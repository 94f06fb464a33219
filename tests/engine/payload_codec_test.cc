// The runtime's compression of payloads (engine/runtime/payload_codec.h): what a message's marks
// do on the way out, what a receiver gets back, and how malformed payloads are refused.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/runtime/payload_codec.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine::runtime {
namespace {

// A sender and a receiver side over CPU Computes; received bytes are copied into an aligned
// buffer, as a receive slot would hold them.
struct Pair {
  explicit Pair(PayloadCompression compression, std::size_t maxDecodedBytes = 1 << 20)
      : compute(kernels::cpu::makeCompute()),
        host(kernels::cpu::makeCompute()),
        codec(*compute, *host, compression, 7, [](std::size_t) { return net::Payload(); },
              maxDecodedBytes) {}

  // What the receiver reads for payload `index` of what encode() produced.
  DecodedPayload roundTrip(const WirePayloads& wire, std::size_t index) {
    const auto bytes = wire.bytes.spans[index];
    auto buffer = std::make_shared<std::vector<float>>((bytes.size() + 3) / 4);
    std::memcpy(buffer->data(), bytes.data(), bytes.size());
    net::Payload payload(std::span<std::byte>(reinterpret_cast<std::byte*>(buffer->data()),
                                              bytes.size()),
                         buffer);
    return codec.decode(wire.descriptors[index], payload);
  }

  std::unique_ptr<kernels::Compute> compute, host;
  PayloadCodec codec;
};

std::vector<float> randomVector(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST_CASE("payload codec: without a codec, or without marks, payloads travel as float32") {
  const std::vector<float> a = randomVector(100, 1);
  for (const char* codec : {"none", "int8"}) {
    Pair pair({kernels::parseCodec(codec), true});
    Message message{.payloads = {a}};  // no marks
    const WirePayloads wire = pair.codec.encode(message);
    REQUIRE(wire.descriptors.size() == 1);
    CHECK(wire.descriptors[0].encoding.codec == net::wire::PayloadEncoding::Codec::none);
    CHECK(wire.descriptors[0].size == 400);
    CHECK(wire.bytes.spans[0].data() == reinterpret_cast<const std::byte*>(a.data()));
    const DecodedPayload got = pair.roundTrip(wire, 0);
    REQUIRE(got.error.empty());
    CHECK(std::vector<float>(got.data.begin(), got.data.end()) == a);
  }
}

TEST_CASE("payload codec: a marked payload travels encoded and comes back within the codec's bound") {
  const std::size_t n = 1000;
  const std::vector<float> a = randomVector(n, 2), b = randomVector(n, 3);
  Pair pair({kernels::parseCodec("int8:100"), false});
  Message message{.payloads = {a, b}, .compressible = {{.payload = 1}}};
  const WirePayloads wire = pair.codec.encode(message);
  REQUIRE(wire.descriptors.size() == 2);
  CHECK(wire.descriptors[0].encoding.codec == net::wire::PayloadEncoding::Codec::none);
  CHECK(wire.descriptors[1].encoding.codec == net::wire::PayloadEncoding::Codec::int8);
  CHECK(wire.descriptors[1].encoding.blockSize == 100);
  CHECK(wire.descriptors[1].elements == n);
  CHECK(wire.descriptors[1].size == 10 * 4 + n);  // 10 scales, n codes
  CHECK(wire.bytes.owner == nullptr);             // the scratch is staged by copy
  CHECK(pair.codec.rawBytesEncoded() == 4 * n);
  CHECK(pair.codec.wireBytesEncoded() == 10 * 4 + n);

  const DecodedPayload raw = pair.roundTrip(wire, 0);
  REQUIRE(raw.error.empty());
  CHECK(std::vector<float>(raw.data.begin(), raw.data.end()) == a);
  const DecodedPayload got = pair.roundTrip(wire, 1);
  REQUIRE(got.error.empty());
  REQUIRE(got.data.size() == n);
  for (std::size_t block = 0; block < 10; ++block) {
    float absmax = 0;
    for (std::size_t i = 0; i < 100; ++i) absmax = std::max(absmax, std::abs(b[block * 100 + i]));
    const double step = absmax / 127.0;
    for (std::size_t i = block * 100; i < block * 100 + 100; ++i)
      CHECK(std::abs(static_cast<double>(got.data[i]) - b[i]) <= step / 2 * (1 + 1e-4));
  }
}

TEST_CASE("payload codec: error feedback keeps what the encoding left out in the residual") {
  const std::size_t n = 500;
  const std::vector<float> a = randomVector(n, 4);
  std::vector<float> residual(n, 0.0f);
  SUBCASE("on: the residual is what was not sent") {
    Pair pair({kernels::parseCodec("topk:0.1"), true});
    Message message{.payloads = {a}, .compressible = {{.payload = 0, .residual = residual}}};
    const DecodedPayload got = pair.roundTrip(pair.codec.encode(message), 0);
    REQUIRE(got.error.empty());
    std::size_t sent = 0;
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(got.data[i] + residual[i] == a[i]);  // top-k moves values exactly
      sent += got.data[i] != 0.0f;
    }
    CHECK(sent == 50);
  }
  SUBCASE("off: the residual is left alone") {
    Pair pair({kernels::parseCodec("topk:0.1"), false});
    Message message{.payloads = {a}, .compressible = {{.payload = 0, .residual = residual}}};
    pair.codec.encode(message);
    for (float r : residual) CHECK(r == 0.0f);
  }
}

TEST_CASE("payload codec: a mark's sent span gets exactly the values the receiver decodes") {
  const std::size_t n = 700;
  const std::vector<float> a = randomVector(n, 5);
  for (const char* name : {"fp16", "bf16", "int8:64", "int4", "topk:0.05", "randk:0.2"}) {
    INFO(name);
    std::vector<float> residual(n, 0.25f), sent(n, 99.0f);
    Pair pair({kernels::parseCodec(name), true});
    Message message{.payloads = {a},
                    .compressible = {{.payload = 0, .residual = residual, .sent = sent}}};
    const DecodedPayload got = pair.roundTrip(pair.codec.encode(message), 0);
    REQUIRE(got.error.empty());
    REQUIRE(got.data.size() == n);
    // Bit for bit, every element (sparse codecs' zeros included), and with the residual's
    // contract intact: sent + residual' == a + residual.
    CHECK(std::memcmp(got.data.data(), sent.data(), n * sizeof(float)) == 0);
    for (std::size_t i = 0; i < n; ++i) CHECK(sent[i] + residual[i] == a[i] + 0.25f);
  }
  SUBCASE("without a codec nothing is written") {
    std::vector<float> sent(n, 99.0f);
    Pair pair({kernels::parseCodec("none"), true});
    pair.codec.encode(Message{.payloads = {a}, .compressible = {{.payload = 0, .sent = sent}}});
    for (float x : sent) CHECK(x == 99.0f);
  }
}

TEST_CASE("payload codec: a reply is encoded with the host Compute, apart from the compute side") {
  const std::size_t n = 600;
  const std::vector<float> a = randomVector(n, 6), b = randomVector(n, 7);
  std::vector<float> sentA(n), sentB(n);
  Pair pair({kernels::parseCodec("int8"), true});
  // One encode on each side, then both read back: neither overwrote the other's scratch.
  const WirePayloads fromCompute =
      pair.codec.encode(Message{.payloads = {a}, .compressible = {{.payload = 0, .sent = sentA}}});
  const WirePayloads reply = pair.codec.encodeReply(
      Message{.payloads = {b}, .compressible = {{.payload = 0, .sent = sentB}}});
  CHECK(reply.descriptors[0].encoding.codec == net::wire::PayloadEncoding::Codec::int8);
  CHECK(fromCompute.bytes.spans[0].data() != reply.bytes.spans[0].data());
  const DecodedPayload gotA = pair.roundTrip(fromCompute, 0);
  const DecodedPayload gotB = pair.roundTrip(reply, 0);
  REQUIRE(gotA.error.empty());
  REQUIRE(gotB.error.empty());
  CHECK(std::memcmp(gotA.data.data(), sentA.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(gotB.data.data(), sentB.data(), n * sizeof(float)) == 0);
  CHECK(pair.codec.encodedPayloads() == 2);
}

TEST_CASE("payload codec: bad marks are misuse") {
  const std::vector<float> a(10, 1.0f);
  std::vector<float> shortResidual(3);
  Pair pair({kernels::parseCodec("fp16"), true});
  CHECK_THROWS_AS(pair.codec.encode(Message{.payloads = {a}, .compressible = {{.payload = 1}}}),
                  Error);
  CHECK_THROWS_AS(pair.codec.encode(Message{.payloads = {a},
                                            .compressible = {{.payload = 0,
                                                              .residual = shortResidual}}}),
                  Error);
  CHECK_THROWS_AS(pair.codec.encode(Message{.payloads = {a},
                                            .compressible = {{.payload = 0,
                                                              .sent = shortResidual}}}),
                  Error);
}

TEST_CASE("payload codec: a malformed payload is refused with the reason, before it is decoded") {
  const std::size_t n = 200;
  const std::vector<float> a = randomVector(n, 5);
  Pair pair({kernels::parseCodec("topk:0.05"), false}, /*maxDecodedBytes=*/4 * 1000);
  const WirePayloads wire = pair.codec.encode(Message{.payloads = {a}, .compressible = {{0}}});
  auto refuse = [&](net::wire::PayloadDescriptor descriptor, std::vector<std::byte> bytes,
                    const std::string& expected) {
    auto buffer = std::make_shared<std::vector<std::byte>>(std::move(bytes));
    net::Payload payload(std::span<std::byte>(buffer->data(), buffer->size()), buffer);
    const DecodedPayload got = pair.codec.decode(descriptor, payload);
    INFO(got.error);
    CHECK(got.data.empty());
    CHECK(got.error.find(expected) != std::string::npos);
  };
  const auto span = wire.bytes.spans[0];
  const std::vector<std::byte> good(span.begin(), span.end());
  const net::wire::PayloadDescriptor descriptor = wire.descriptors[0];

  // The last index points past the end.
  std::vector<std::byte> badIndex = good;
  const std::uint32_t past = n;
  std::memcpy(badIndex.data() + badIndex.size() - 4, &past, 4);
  refuse(descriptor, badIndex, "topk");
  // Truncated.
  refuse(descriptor, std::vector<std::byte>(good.begin(), good.end() - 4), "topk");
  // A fraction no codec has.
  net::wire::PayloadDescriptor badFraction = descriptor;
  badFraction.encoding.fraction = 2.0;
  refuse(badFraction, good, "invalid");
  // More elements than this peer takes: refused before anything is allocated.
  net::wire::PayloadDescriptor huge = descriptor;
  huge.elements = std::uint64_t{1} << 40;
  refuse(huge, good, "more than the 1000");
  // A float32 payload whose length is not a whole number of floats.
  refuse(net::wire::PayloadDescriptor{}, std::vector<std::byte>(7), "not float32");
  // The well-formed payload still decodes.
  auto buffer = std::make_shared<std::vector<std::byte>>(good);
  net::Payload payload(std::span<std::byte>(buffer->data(), buffer->size()), buffer);
  CHECK(pair.codec.decode(descriptor, payload).error.empty());
}

TEST_CASE("payload codec: the wire's encoding names the codec and reads back to it") {
  for (const char* text : {"fp16", "bf16", "int8:64", "int4:32", "topk:0.01", "topk:0.02:sampled",
                           "randk:0.1"}) {
    const kernels::Codec codec = kernels::parseCodec(text);
    CHECK(codecOf(encodingOf(codec)) == codec);
  }
  net::wire::PayloadEncoding odd{net::wire::PayloadEncoding::Codec::int4, 3, 0, false};
  CHECK_THROWS_AS(codecOf(odd), Error);
}

}  // namespace
}  // namespace gossamer::engine::runtime
