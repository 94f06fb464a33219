// Replays the checked-in libFuzzer seed corpora of the wire targets (tests/fuzz/corpus/) through
// the same fuzz bodies as the fuzz targets, so that every corpus input is a regression test of
// the default build.
#include <doctest/doctest.h>

#include "tests/net/wire_fuzz.h"
#include "tests/support/corpus.h"

TEST_CASE("net wire: frame decoder fuzz corpus replays cleanly") {
  CHECK(gossamer::test::replayCorpus("frame_decoder",
                                     &gossamer::net::testing::fuzzFrameDecoder) >= 10);
}

TEST_CASE("net wire: handshake fuzz corpus replays cleanly") {
  CHECK(gossamer::test::replayCorpus("handshake", &gossamer::net::testing::fuzzHandshake) >= 10);
}
