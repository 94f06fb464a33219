// The data layer: IDX reading (round trip and every corrupt case), the Fashion-MNIST files when
// installed, synthetic data, sharding and batch sampling.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <zlib.h>

#include "engine/base/enforce.h"
#include "engine/data/batches.h"
#include "engine/data/dataset.h"
#include "engine/data/idx.h"
#include "engine/data/sharding.h"
#include "engine/data/synthetic.h"

namespace fs = std::filesystem;
using namespace gossamer::engine::data;

namespace {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device entropy;
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = fs::temp_directory_path() /
            ("gossamer-data-test-" + std::to_string(stamp) + "-" + std::to_string(entropy()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void appendWord(std::vector<unsigned char>& out, std::uint32_t word) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back((word >> shift) & 0xFF);
}

// An IDX file's bytes: magic, big-endian dimensions, then `payload` as is (which may disagree
// with the dimensions, to build corrupt files).
std::vector<unsigned char> idxBytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                    const std::vector<unsigned char>& payload) {
  std::vector<unsigned char> out;
  appendWord(out, magic);
  for (const std::uint32_t dim : dims) appendWord(out, dim);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void writeGzip(const std::string& path, const std::vector<unsigned char>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

void writePlain(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Three 2x3 images with pixels 0, 1, ..., 17 (and 255 as the last) and labels 2, 0, 1.
struct TinyIdx {
  std::vector<unsigned char> pixels;
  std::vector<unsigned char> labels{2, 0, 1};
  TinyIdx() {
    for (unsigned char v = 0; v < 18; ++v) pixels.push_back(v);
    pixels.back() = 255;
  }
  std::vector<unsigned char> imagesFile() const { return idxBytes(0x803, {3, 2, 3}, pixels); }
  std::vector<unsigned char> labelsFile() const { return idxBytes(0x801, {3}, labels); }
};

// Runs `load` and returns the gossamer::Error message it throws (fails the test if none).
template <typename Load>
std::string errorOf(Load&& load) {
  try {
    load();
  } catch (const gossamer::Error& e) {
    return e.what();
  }
  FAIL("expected a gossamer::Error");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A dataset whose single feature is the row index, so served rows identify themselves.
Dataset indexDataset(std::size_t count) {
  Dataset d;
  d.name = "index";
  d.features = 1;
  d.classes = 3;
  for (std::size_t i = 0; i < count; ++i) {
    d.inputs.push_back(static_cast<float>(i));
    d.labels.push_back(static_cast<std::int32_t>(i % 3));
  }
  return d;
}

// Row indices of the next `batches` batches.
std::vector<std::vector<std::size_t>> drain(BatchSampler& sampler, const Dataset& dataset,
                                            std::size_t batchSize, std::size_t batches) {
  std::vector<float> inputs(batchSize * dataset.features);
  std::vector<std::int32_t> labels(batchSize);
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t b = 0; b < batches; ++b) {
    const std::size_t rows = sampler.next(inputs, labels);
    std::vector<std::size_t> batch;
    for (std::size_t r = 0; r < rows; ++r) {
      const auto index = static_cast<std::size_t>(inputs[r]);
      CHECK(labels[r] == dataset.labels[index]);
      batch.push_back(index);
    }
    out.push_back(std::move(batch));
  }
  return out;
}

std::vector<std::int32_t> balancedLabels(std::size_t classes, std::size_t perClass) {
  std::vector<std::int32_t> labels;
  for (std::size_t i = 0; i < classes * perClass; ++i) {
    labels.push_back(static_cast<std::int32_t>(i % classes));
  }
  return labels;
}

void checkPartition(const std::vector<std::vector<std::size_t>>& shards, std::size_t count,
                    std::size_t expectedShards) {
  REQUIRE(shards.size() == expectedShards);
  std::vector<int> seen(count, 0);
  for (const auto& shard : shards) {
    CHECK_FALSE(shard.empty());
    CHECK(std::is_sorted(shard.begin(), shard.end()));
    for (const std::size_t i : shard) {
      REQUIRE(i < count);
      ++seen[i];
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

// Mean over shards of the fraction of a shard's samples that belong to its most common class.
double meanDominantFraction(const std::vector<std::vector<std::size_t>>& shards,
                            const std::vector<std::int32_t>& labels, std::size_t classes) {
  double sum = 0.0;
  for (const auto& shard : shards) {
    std::vector<std::size_t> perClass(classes, 0);
    for (const std::size_t i : shard) ++perClass[static_cast<std::size_t>(labels[i])];
    sum += static_cast<double>(*std::max_element(perClass.begin(), perClass.end())) /
           static_cast<double>(shard.size());
  }
  return sum / static_cast<double>(shards.size());
}

}  // namespace

TEST_CASE("data: IDX round trip, gzip'd and plain") {
  TempDir dir;
  const TinyIdx tiny;
  for (const bool gzip : {true, false}) {
    CAPTURE(gzip);
    const std::string images = dir.file(gzip ? "images.gz" : "images");
    const std::string labels = dir.file(gzip ? "labels.gz" : "labels");
    (gzip ? writeGzip : writePlain)(images, tiny.imagesFile());
    (gzip ? writeGzip : writePlain)(labels, tiny.labelsFile());
    const Dataset d = loadIdx(images, labels, "tiny");
    CHECK(d.name == "tiny");
    CHECK(d.count() == 3);
    CHECK(d.features == 6);
    CHECK(d.classes == 3);
    CHECK(d.labels == std::vector<std::int32_t>{2, 0, 1});
    REQUIRE(d.inputs.size() == 18);
    for (std::size_t i = 0; i < 18; ++i) {
      CHECK(d.inputs[i] == doctest::Approx(tiny.pixels[i] / 255.0));
    }
    CHECK(d.inputs.front() == 0.0f);
    CHECK(d.inputs.back() == 1.0f);
    CHECK(d.row(1)[0] == doctest::Approx(6 / 255.0));
  }
}

TEST_CASE("data: corrupt IDX files throw errors naming the file") {
  TempDir dir;
  const TinyIdx tiny;
  const std::string goodImages = dir.file("good-images.gz");
  const std::string goodLabels = dir.file("good-labels.gz");
  writeGzip(goodImages, tiny.imagesFile());
  writeGzip(goodLabels, tiny.labelsFile());
  const std::string bad = dir.file("bad.gz");

  SUBCASE("bad magic") {
    writeGzip(bad, idxBytes(0x804, {3, 2, 3}, tiny.pixels));
    const std::string message = errorOf([&] { loadIdx(bad, goodLabels, "t"); });
    CHECK(contains(message, bad));
    CHECK(contains(message, "0x00000804"));
  }
  SUBCASE("labels file given as images") {
    const std::string message = errorOf([&] { loadIdx(goodLabels, goodImages, "t"); });
    CHECK(contains(message, goodLabels));
    CHECK(contains(message, "labels file"));
  }
  SUBCASE("truncated images") {
    std::vector<unsigned char> pixels = tiny.pixels;
    pixels.resize(14);
    writeGzip(bad, idxBytes(0x803, {3, 2, 3}, pixels));
    const std::string message = errorOf([&] { loadIdx(bad, goodLabels, "t"); });
    CHECK(contains(message, bad));
    CHECK(contains(message, "expected 18 bytes"));
    CHECK(contains(message, "got 14"));
  }
  SUBCASE("truncated header") {
    writeGzip(bad, {0x00, 0x00, 0x08, 0x03, 0x00, 0x00});
    const std::string message = errorOf([&] { loadIdx(bad, goodLabels, "t"); });
    CHECK(contains(message, bad));
    CHECK(contains(message, "truncated"));
  }
  SUBCASE("truncated labels") {
    writeGzip(bad, idxBytes(0x801, {3}, {2, 0}));
    const std::string message = errorOf([&] { loadIdx(goodImages, bad, "t"); });
    CHECK(contains(message, bad));
    CHECK(contains(message, "expected 3 bytes"));
    CHECK(contains(message, "got 2"));
  }
  SUBCASE("truncated gzip stream") {
    std::vector<unsigned char> compressed;
    writeGzip(bad, tiny.imagesFile());
    {
      std::ifstream in(bad, std::ios::binary);
      compressed.assign(std::istreambuf_iterator<char>(in), {});
    }
    compressed.resize(compressed.size() / 2);
    writePlain(bad, compressed);
    const std::string message = errorOf([&] { loadIdx(bad, goodLabels, "t"); });
    CHECK(contains(message, bad));
    CHECK(contains(message, "truncated"));
    CHECK(contains(message, "unexpected end of file"));  // gzerror's text
  }
  SUBCASE("count mismatch") {
    writeGzip(bad, idxBytes(0x801, {2}, {2, 0}));
    const std::string message = errorOf([&] { loadIdx(goodImages, bad, "t"); });
    CHECK(contains(message, goodImages));
    CHECK(contains(message, bad));
    CHECK(contains(message, "3 images"));
    CHECK(contains(message, "2 labels"));
  }
  SUBCASE("absurd dimensions are rejected before allocating") {
    writeGzip(bad, idxBytes(0x803, {4000000000u, 100000, 100000}, {}));
    const std::string message = errorOf([&] { loadIdx(bad, goodLabels, "t"); });
    CHECK(contains(message, bad));
    CHECK(contains(message, "absurd"));
  }
  SUBCASE("zero dimension") {
    writeGzip(bad, idxBytes(0x803, {3, 0, 3}, {}));
    CHECK(contains(errorOf([&] { loadIdx(bad, goodLabels, "t"); }), bad));
  }
  SUBCASE("corrupt gzip data reports zlib's message") {
    // A gzip header followed by a deflate block of the reserved type 3.
    writePlain(bad, {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x07, 0x00});
    const std::string message = errorOf([&] { loadIdx(bad, goodLabels, "t"); });
    CHECK(contains(message, bad));
    CHECK(contains(message, "invalid block type"));
  }
  SUBCASE("missing file") {
    const std::string missing = dir.file("no-such-images.gz");
    const std::string message = errorOf([&] { loadIdx(missing, goodLabels, "t"); });
    CHECK(contains(message, missing));
    CHECK(contains(message, "dataset-fashion-mnist"));
  }
  SUBCASE("missing Fashion-MNIST directory") {
    const std::string missingDir = dir.file("no-such-dir");
    const std::string message = errorOf([&] { loadFashionMnist(missingDir, Split::kTest); });
    CHECK(contains(message, missingDir));
    CHECK(contains(message, "t10k-images-idx3-ubyte.gz"));
    CHECK(contains(message, "apt-get install dataset-fashion-mnist"));
    CHECK(contains(message, "--data-dir"));
  }
}

TEST_CASE("data: Fashion-MNIST from the Debian package") {
  if (!fs::exists(kFashionMnistDir)) {
    MESSAGE("skipped: " << kFashionMnistDir
                        << " not found (apt-get install dataset-fashion-mnist)");
    return;
  }
  const Dataset train = loadFashionMnist(kFashionMnistDir, Split::kTrain);
  CHECK(train.name == "fashion-mnist-train");
  CHECK(train.count() == 60000);
  CHECK(train.features == 784);
  CHECK(train.classes == 10);
  CHECK(train.inputs.size() == 60000u * 784u);
  std::vector<std::size_t> perClass(10, 0);
  for (const std::int32_t label : train.labels) ++perClass.at(static_cast<std::size_t>(label));
  CHECK(std::all_of(perClass.begin(), perClass.end(), [](std::size_t n) { return n == 6000; }));
  const auto [low, high] = std::minmax_element(train.inputs.begin(), train.inputs.end());
  CHECK(*low == 0.0f);
  CHECK(*high == 1.0f);

  const Dataset test = loadFashionMnist(kFashionMnistDir, Split::kTest);
  CHECK(test.name == "fashion-mnist-test");
  CHECK(test.count() == 10000);
  CHECK(test.features == 784);
  CHECK(test.classes == 10);
}

TEST_CASE("data: Dataset::subset keeps rows in the given order") {
  const Dataset d = indexDataset(10);
  const std::vector<std::size_t> rows{7, 2, 2, 9};
  const Dataset s = d.subset(rows);
  CHECK(s.name == d.name);
  CHECK(s.features == 1);
  CHECK(s.classes == 3);
  CHECK(s.inputs == std::vector<float>{7, 2, 2, 9});
  CHECK(s.labels == std::vector<std::int32_t>{1, 2, 2, 0});
  const std::vector<std::size_t> outOfRange{10};
  CHECK_THROWS_AS(d.subset(outOfRange), gossamer::Error);
}

TEST_CASE("data: synthetic data is deterministic, balanced and shares its distribution") {
  SyntheticOptions options;
  options.count = 1003;
  options.features = 8;
  options.classes = 5;
  const Dataset a = makeSynthetic(options);
  const Dataset b = makeSynthetic(options);
  CHECK(a.inputs == b.inputs);
  CHECK(a.labels == b.labels);
  CHECK(a.count() == 1003);
  CHECK(a.features == 8);
  CHECK(a.classes == 5);
  CHECK(a.inputs.size() == 1003u * 8u);

  std::vector<std::size_t> perClass(5, 0);
  for (const std::int32_t label : a.labels) ++perClass[static_cast<std::size_t>(label)];
  const auto [fewest, most] = std::minmax_element(perClass.begin(), perClass.end());
  CHECK(*most - *fewest <= 1);
  // Shuffled, not left round-robin.
  std::size_t roundRobin = 0;
  for (std::size_t i = 0; i < a.count(); ++i) roundRobin += a.labels[i] == static_cast<int>(i % 5);
  CHECK(roundRobin < a.count() / 2);

  auto classMeans = [](const Dataset& d) {
    std::vector<double> sums(d.classes * d.features, 0.0);
    std::vector<double> counts(d.classes, 0.0);
    for (std::size_t i = 0; i < d.count(); ++i) {
      const auto c = static_cast<std::size_t>(d.labels[i]);
      counts[c] += 1.0;
      for (std::size_t f = 0; f < d.features; ++f) sums[c * d.features + f] += d.row(i)[f];
    }
    for (std::size_t k = 0; k < sums.size(); ++k) sums[k] /= counts[k / d.features];
    return sums;
  };
  auto maxDistance = [](const std::vector<double>& x, const std::vector<double>& y) {
    double worst = 0.0;
    for (std::size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]));
    return worst;
  };

  // Same distribution, other samples: class means agree up to sampling noise (stddev of a mean
  // of ~200 samples with noise 1 is ~0.07).
  SyntheticOptions testOptions = options;
  testOptions.sampleSeed = 99;
  const Dataset test = makeSynthetic(testOptions);
  CHECK(test.inputs != a.inputs);
  CHECK(maxDistance(classMeans(a), classMeans(test)) < 0.4);
  // Another distribution: class means differ by far more (they lie 3 from the origin).
  SyntheticOptions otherOptions = options;
  otherOptions.distributionSeed = 7;
  CHECK(maxDistance(classMeans(a), classMeans(makeSynthetic(otherOptions))) > 1.0);

  SyntheticOptions badOptions;
  badOptions.classes = 1;
  CHECK_THROWS_AS(makeSynthetic(badOptions), gossamer::Error);
  badOptions = {};
  badOptions.count = 0;
  CHECK_THROWS_AS(makeSynthetic(badOptions), gossamer::Error);
  badOptions = {};
  badOptions.features = 0;
  CHECK_THROWS_AS(makeSynthetic(badOptions), gossamer::Error);
}

TEST_CASE("data: iid sharding is a deterministic partition into near-equal blocks") {
  const std::vector<std::int32_t> labels = balancedLabels(10, 101);  // 1010 samples
  ShardOptions options;
  options.shards = 7;
  options.seed = 5;
  const auto shards = shardIndices(labels, 10, options);
  checkPartition(shards, labels.size(), 7);
  std::size_t smallest = labels.size();
  std::size_t largest = 0;
  for (const auto& shard : shards) {
    smallest = std::min(smallest, shard.size());
    largest = std::max(largest, shard.size());
  }
  CHECK(largest - smallest <= 1);
  CHECK(shardIndices(labels, 10, options) == shards);
  options.seed = 6;
  CHECK(shardIndices(labels, 10, options) != shards);

  options.shards = 1;
  const auto one = shardIndices(labels, 10, options);
  REQUIRE(one.size() == 1);
  CHECK(one[0].size() == labels.size());

  options.shards = labels.size();
  checkPartition(shardIndices(labels, 10, options), labels.size(), labels.size());
}

TEST_CASE("data: Dirichlet sharding skews labels by alpha and leaves no shard empty") {
  const std::vector<std::int32_t> labels = balancedLabels(10, 200);  // 2000 samples
  ShardOptions options;
  options.kind = SplitKind::kDirichlet;
  options.shards = 10;
  options.seed = 3;

  options.dirichletAlpha = 0.1;
  const auto skewed = shardIndices(labels, 10, options);
  checkPartition(skewed, labels.size(), 10);
  CHECK(shardIndices(labels, 10, options) == skewed);
  const double skewedDominance = meanDominantFraction(skewed, labels, 10);
  MESSAGE("alpha 0.1: mean dominant class fraction " << skewedDominance);
  // Over 500 seeds this ranges 0.46 to 0.76; an iid split gives about 0.10.
  CHECK(skewedDominance > 0.4);

  options.dirichletAlpha = 1000.0;
  const auto uniform = shardIndices(labels, 10, options);
  checkPartition(uniform, labels.size(), 10);
  const double uniformDominance = meanDominantFraction(uniform, labels, 10);
  MESSAGE("alpha 1000: mean dominant class fraction " << uniformDominance);
  CHECK(uniformDominance < 0.2);
  for (const auto& shard : uniform) CHECK(shard.size() == doctest::Approx(200).epsilon(0.15));

  options.seed = 4;
  CHECK(shardIndices(labels, 10, options) != uniform);

  // Many shards, few samples and tiny alpha: most shards receive nothing from the draws and must
  // be refilled.
  const std::vector<std::int32_t> few = balancedLabels(3, 10);
  options.shards = 25;
  options.dirichletAlpha = 0.01;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    options.seed = seed;
    checkPartition(shardIndices(few, 3, options), few.size(), 25);
  }
  options.shards = few.size();
  checkPartition(shardIndices(few, 3, options), few.size(), few.size());
}

TEST_CASE("data: sharding validates its options") {
  const std::vector<std::int32_t> labels = balancedLabels(2, 5);
  ShardOptions options;
  options.shards = 0;
  CHECK_THROWS_AS(shardIndices(labels, 2, options), gossamer::Error);
  options.shards = 11;
  CHECK_THROWS_AS(shardIndices(labels, 2, options), gossamer::Error);
  options.shards = 2;
  CHECK_THROWS_AS(shardIndices(labels, 1, options), gossamer::Error);  // label 1 out of range
  options.kind = SplitKind::kDirichlet;
  options.dirichletAlpha = 0.0;
  CHECK_THROWS_AS(shardIndices(labels, 2, options), gossamer::Error);

  CHECK(parseSplitKind("iid") == SplitKind::kIid);
  CHECK(parseSplitKind("dirichlet") == SplitKind::kDirichlet);
  CHECK(std::string(splitKindName(SplitKind::kDirichlet)) == "dirichlet");
  const std::string message = errorOf([] { parseSplitKind("noniid"); });
  CHECK(contains(message, "noniid"));
  CHECK(contains(message, "iid, dirichlet"));
}

TEST_CASE("data: batch sampler visits each index once per epoch, reshuffled") {
  const Dataset d = indexDataset(300);
  std::vector<std::size_t> shard;
  for (std::size_t i = 0; i < 300; i += 3) shard.push_back(i);  // 100 rows
  const std::size_t batchSize = 16;
  BatchSampler sampler(d, shard, batchSize, 11);
  CHECK(sampler.size() == 100);
  CHECK(sampler.batchesPerEpoch() == 7);

  std::vector<std::vector<std::size_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    CHECK(sampler.epoch() == static_cast<std::uint64_t>(epoch));
    CHECK(sampler.cursor() == 0);
    const auto batches = drain(sampler, d, batchSize, sampler.batchesPerEpoch());
    std::vector<std::size_t> order;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      CHECK(batches[b].size() == (b + 1 < batches.size() ? batchSize : 100 - 6 * batchSize));
      order.insert(order.end(), batches[b].begin(), batches[b].end());
    }
    std::vector<std::size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == shard);
    orders.push_back(order);
  }
  CHECK(sampler.epoch() == 3);
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  CHECK(orders[0] != shard);

  // The order is a function of (seed, epoch): a fresh sampler repeats it; another seed does not.
  BatchSampler again(d, shard, batchSize, 11);
  CHECK(drain(again, d, batchSize, 1)[0] ==
        std::vector<std::size_t>(orders[0].begin(), orders[0].begin() + batchSize));
  BatchSampler other(d, shard, batchSize, 12);
  CHECK(drain(other, d, batchSize, 1)[0] !=
        std::vector<std::size_t>(orders[0].begin(), orders[0].begin() + batchSize));
}

TEST_CASE("data: batch sampler seek resumes exactly") {
  const Dataset d = indexDataset(50);
  std::vector<std::size_t> shard(50);
  std::iota(shard.begin(), shard.end(), std::size_t{0});
  const std::size_t batchSize = 8;  // 7 batches per epoch, the last of 2 rows

  BatchSampler original(d, shard, batchSize, 42);
  drain(original, d, batchSize, 12);  // into epoch 1
  const std::uint64_t epoch = original.epoch();
  const std::size_t cursor = original.cursor();
  CHECK(epoch == 1);
  CHECK(cursor == 5 * batchSize);
  const auto expected = drain(original, d, batchSize, 10);  // across the next epoch boundary

  BatchSampler resumed(d, shard, batchSize, 42);
  resumed.seek(epoch, cursor);
  CHECK(resumed.epoch() == epoch);
  CHECK(resumed.cursor() == cursor);
  CHECK(drain(resumed, d, batchSize, 10) == expected);

  // Seeking backwards works too, and a cursor at the end of an epoch means the next epoch.
  resumed.seek(0, 0);
  BatchSampler fresh(d, shard, batchSize, 42);
  CHECK(drain(resumed, d, batchSize, 3) == drain(fresh, d, batchSize, 3));
  resumed.seek(2, 50);
  CHECK(resumed.epoch() == 3);
  CHECK(resumed.cursor() == 0);
  CHECK_THROWS_AS(resumed.seek(0, 51), gossamer::Error);
}

TEST_CASE("data: batch sampler and copyRows check their buffers") {
  const Dataset d = makeSynthetic({.count = 20, .features = 3, .classes = 2});
  std::vector<std::size_t> shard{0, 1, 2, 3, 4};
  BatchSampler sampler(d, shard, 4, 1);
  std::vector<float> inputs(4 * 3);
  std::vector<std::int32_t> labels(4);
  CHECK_THROWS_AS(sampler.next(std::span<float>(inputs).first(11), labels), gossamer::Error);
  CHECK_THROWS_AS(sampler.next(inputs, std::span<std::int32_t>(labels).first(3)), gossamer::Error);
  CHECK(sampler.next(inputs, labels) == 4);
  CHECK(sampler.next(inputs, labels) == 1);  // short last batch
  CHECK(sampler.epoch() == 1);

  CHECK_THROWS_AS(BatchSampler(d, {}, 4, 1), gossamer::Error);
  CHECK_THROWS_AS(BatchSampler(d, shard, 0, 1), gossamer::Error);
  CHECK_THROWS_AS(BatchSampler(d, {20}, 4, 1), gossamer::Error);

  const std::vector<std::size_t> rows{19, 0};
  copyRows(d, rows, inputs, labels);
  for (std::size_t f = 0; f < 3; ++f) {
    CHECK(inputs[f] == d.row(19)[f]);
    CHECK(inputs[3 + f] == d.row(0)[f]);
  }
  CHECK(labels[0] == d.labels[19]);
  CHECK(labels[1] == d.labels[0]);
  CHECK_THROWS_AS(copyRows(d, rows, std::span<float>(inputs).first(5), labels), gossamer::Error);
  const std::vector<std::size_t> outOfRange{20};
  CHECK_THROWS_AS(copyRows(d, outOfRange, inputs, labels), gossamer::Error);
}
