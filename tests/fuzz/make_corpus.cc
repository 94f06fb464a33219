// Writes the seed corpora of the wire fuzz targets: make_corpus <repo>/tests/fuzz/corpus
// (valid encodings of every header kind, hostile frames, and handshake scenarios; see
// tests/net/wire_fuzz.h for the handshake input format). Deterministic: rerunning rewrites the
// same files.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/cpu/cpu_compute.h"
#include "net/wire/codec.h"
#include "tests/kernels/codec_fuzz.h"
#include "tests/net/wire_samples.h"

namespace {

namespace fs = std::filesystem;
namespace wire = gossamer::net::wire;
namespace t = gossamer::net::testing;

void write(const fs::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void write(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  write(path,
        std::vector<std::byte>(reinterpret_cast<const std::byte*>(bytes.data()),
                               reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size()));
}

std::vector<std::byte> frame(const wire::HandshakeMessage& message) {
  return wire::encodeHandshake(message);
}

// Payload decoder: a valid payload of every codec (encoded by the CPU reference), and each one
// broken in the ways checkEncoded must catch (truncated, an extra byte, a flipped byte, a count
// or an element count that does not match).
void writeCodecCorpus(const fs::path& dir) {
  namespace k = gossamer::kernels;
  fs::create_directories(dir);
  const auto compute = k::cpu::makeCompute();
  const std::uint16_t n = 300;
  std::vector<float> input(n);
  for (std::uint16_t i = 0; i < n; ++i)
    input[i] = static_cast<float>((i * 37) % 101) / 17.0f - 3.0f;
  for (const char* text : {"fp16", "bf16", "int8:64", "int4:32", "int8:7", "topk:0.05",
                           "topk:0.1:sampled", "randk:0.02"}) {
    const k::Codec codec = k::parseCodec(text);
    std::vector<std::byte> payload(k::encodedBytes(codec, n));
    payload.resize(compute->encode(codec, input, {}, payload, 42));
    std::string name = text;
    for (char& c : name)
      if (c == ':' || c == '.') c = '_';
    auto input = [&](std::uint16_t elements, const std::vector<std::byte>& bytes) {
      std::vector<std::uint8_t> out = gossamer::kernels::testing::codecFuzzHeader(codec, elements);
      for (std::byte b : bytes) out.push_back(static_cast<std::uint8_t>(b));
      return out;
    };
    write(dir / (name + "_valid"), input(n, payload));
    write(dir / (name + "_truncated"),
          input(n, std::vector<std::byte>(payload.begin(), payload.end() - 1)));
    std::vector<std::byte> longer = payload;
    longer.push_back(std::byte{0});
    write(dir / (name + "_extra_byte"), input(n, longer));
    std::vector<std::byte> flipped = payload;
    flipped[flipped.size() / 2] ^= std::byte{0x80};
    write(dir / (name + "_flipped"), input(n, flipped));
    std::vector<std::byte> lastFlipped = payload;
    lastFlipped.back() ^= std::byte{0xff};
    write(dir / (name + "_last_byte_flipped"), input(n, lastFlipped));
    write(dir / (name + "_fewer_elements"), input(n - 50, payload));
    write(dir / (name + "_more_elements"), input(60000, payload));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus directory>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const fs::path decoder = root / "frame_decoder";
  const fs::path handshake = root / "handshake";
  fs::create_directories(decoder);
  fs::create_directories(handshake);

  // Frame decoder: every sample kind, a multi-segment message, and hostile frames.
  const auto samples = t::sampleHeaders();
  for (std::size_t i = 0; i < samples.size(); ++i) {
    write(decoder / ("sample_" + std::to_string(i)), wire::encodeHeader(samples[i]));
  }
  std::vector<wire::MemberUpdate> members;
  for (std::uint64_t i = 0; i < 40; ++i) {
    members.push_back({i, gossamer::net::Endpoint{"10.0.0." + std::to_string(i), 7000}, i,
                       static_cast<wire::MemberState>(i % 4)});
  }
  write(decoder / "multi_segment_gossip", wire::encodeMembership(wire::Gossip{1, members}));
  write(decoder / "huge_segment_claim", t::hugeSegmentClaim());
  write(decoder / "segment_count_claim", t::segmentCountClaim());
  write(decoder / "amplified_list", t::amplifiedList());
  write(decoder / "small_list", t::amplifiedList(3));
  write(decoder / "self_reference", t::selfReference());
  write(decoder / "empty", std::vector<std::byte>{});
  auto truncated = wire::encodeHeader(samples[1]);
  truncated.resize(truncated.size() - 8);
  write(decoder / "truncated_envelope", truncated);

  // Handshake, raw scenario against the server (byte 0 = 0) and the client (byte 0 = 1).
  const wire::PeerInfo info{1, "fuzz", 9, gossamer::net::Endpoint{"127.0.0.1", 7009},
                            wire::ModelFingerprint{101770, "f32", 0x1234abcd}};
  const std::vector<std::byte> nonce(32, std::byte{7});
  const std::vector<std::byte> tag(32, std::byte{9});
  const auto hello = frame(wire::ClientHello{info, nonce});
  write(handshake / "raw_server_hello_only", t::rawHandshakeInput(false, {hello}));
  write(handshake / "raw_server_hello_and_forged_proof",
        t::rawHandshakeInput(false, {hello, frame(wire::ClientProof{tag})}));
  write(handshake / "raw_server_short_nonce",
        t::rawHandshakeInput(false, {frame(wire::ClientHello{info, {std::byte{1}}})}));
  write(handshake / "raw_server_refusal",
        t::rawHandshakeInput(false,
                             {frame(wire::HandshakeRefusal{wire::RefusalCode::version, "no"})}));
  write(handshake / "raw_server_envelope",
        t::rawHandshakeInput(false, {wire::encodeEnvelope(wire::EnvelopeHeader{})}));
  write(handshake / "raw_server_garbage", t::rawHandshakeInput(false, {t::hugeSegmentClaim()}));
  {
    auto withPayload = t::rawHandshakeInput(false, {hello});
    withPayload[2] |= 0x80;  // the high bit of the length: a payload follows
    withPayload.push_back(3);
    withPayload.insert(withPayload.end(), {1, 2, 3});
    write(handshake / "raw_server_hello_with_payload", withPayload);
  }
  write(handshake / "raw_client_forged_server_hello",
        t::rawHandshakeInput(
            true, {frame(wire::ServerHello{info, nonce, tag}), frame(wire::HandshakeAccept{})}));
  write(handshake / "raw_client_accept_first",
        t::rawHandshakeInput(true, {frame(wire::HandshakeAccept{})}));
  write(handshake / "raw_client_refusal",
        t::rawHandshakeInput(true, {frame(wire::HandshakeRefusal{wire::RefusalCode::authentication,
                                                                 "bad tag \x01\x7f"})}));
  write(handshake / "raw_client_silent", t::rawHandshakeInput(true, {}));

  // Man in the middle: byte 0 = 2 | differences (bit 2 secret, 3 version, 4 cluster,
  // 5 parameters, 6 layout hash, 7 the server's id known to the client by another key), then one
  // op per frame (0-2 pass, 3 flip, 4 truncate, 5 replace, 6 add payload, 7 drop).
  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> mitm = {
      {"mitm_honest", {2}},
      {"mitm_wrong_secret", {2 | 4}},
      {"mitm_version", {2 | 8}},
      {"mitm_cluster", {2 | 16}},
      {"mitm_parameters", {2 | 32}},
      {"mitm_layout", {2 | 64}},
      {"mitm_identity", {2 | 128}},
      {"mitm_identity_and_cluster", {2 | 16 | 128}},
      {"mitm_secret_and_version", {2 | 4 | 8}},
      {"mitm_flip_client_hello", {2, 3, 40, 0, 0x55}},
      {"mitm_flip_server_hello", {2, 0, 3, 90, 0, 0x01}},
      {"mitm_truncate_server_hello", {2, 0, 4, 16, 0}},
      {"mitm_replace_proof", {2, 0, 0, 5, 4, 0, 0, 0, 0}},
      {"mitm_payload_on_proof", {2, 0, 0, 6, 2, 0xaa, 0xbb}},
      {"mitm_drop_proof", {2, 0, 0, 7}},
      {"mitm_drop_accept", {2, 0, 0, 0, 7}},
      {"mitm_flip_accept", {2, 0, 0, 0, 3, 9, 0, 0x02}},
  };
  for (const auto& [name, bytes] : mitm) write(handshake / name, bytes);

  writeCodecCorpus(root / "payload_decoder");
  return 0;
}
