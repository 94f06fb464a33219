// Replays the checked-in seed corpus of the payload-decoder fuzz target
// (tests/fuzz/corpus/payload_decoder) through the same body as the target.
#include <doctest/doctest.h>

#include "tests/kernels/codec_fuzz.h"
#include "tests/support/corpus.h"

TEST_CASE("codec: payload decoder fuzz corpus replays cleanly") {
  CHECK(gossamer::test::replayCorpus("payload_decoder",
                                     &gossamer::kernels::testing::fuzzPayloadDecoder) >= 40);
}
