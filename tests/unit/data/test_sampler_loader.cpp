// The global sequence order and the per-rank loader: unshuffled starts are g*T, shuffled
// epochs are seed-determined permutations, DP slices partition each step's global batch,
// and prefetching or seeking never changes what a rank sees.
#include "catch_compat.h"

#include <algorithm>
#include <set>

#include "data/data.h"
#include "data_test_util.h"

using namespace strata;
using strata::test::TempDir;
using strata::test::user_error_message;

namespace {
constexpr int kT = 16;
constexpr int64_t kTokens = 10007;  // (10007 - 1) / 16 = 625 sequences

// Token i is i mod 60000: a row's first token tells where it was read from.
TokenDataset make_dataset(const TempDir& dir) {
  std::vector<int32_t> first, second;
  for (int64_t i = 0; i < kTokens; ++i) (i < 4000 ? first : second).push_back(static_cast<int32_t>(i % 60000));
  write_token_shard(dir.file("d_0.bin"), first, false);
  write_token_shard(dir.file("d_1.bin"), second, false);
  return TokenDataset::open(dir.file("d_*.bin"), 60000, "data.train");
}

using Row = std::vector<int32_t>;
std::vector<Row> rows_of(const MicroBatch& batch, int micro) {
  std::vector<Row> rows;
  for (int b = 0; b < micro; ++b) rows.emplace_back(batch.tokens.begin() + b * kT, batch.tokens.begin() + (b + 1) * kT);
  return rows;
}
}  // namespace

TEST_CASE("unshuffled sampler: sequence g starts at g*T and wraps each epoch") {
  const GlobalSampler sampler(kTokens, kT, false, 0);
  REQUIRE(sampler.num_sequences() == 625);
  for (int64_t g : {0, 1, 17, 624}) CHECK(sampler.sequence_start(g) == g * kT);
  CHECK(sampler.sequence_start(625) == 0);
  CHECK(sampler.sequence_start(625 * 3 + 5) == 5 * kT);
  CHECK(sampler.epoch_of(625 * 3 + 5) == 3);
  // Exactly n*T + 1 tokens hold n sequences: the last target is the last token.
  CHECK(GlobalSampler(5 * kT + 1, kT, false, 0).num_sequences() == 5);
  CHECK(GlobalSampler(5 * kT, kT, false, 0).num_sequences() == 4);
}

TEST_CASE("shuffled sampler: each epoch a permutation, per-epoch and per-seed, reproducible") {
  const GlobalSampler sampler(kTokens, kT, true, 1234);
  const int64_t n = sampler.num_sequences();
  auto epoch_order = [&](const GlobalSampler& s, int64_t epoch) {
    std::vector<int64_t> order;
    for (int64_t k = 0; k < n; ++k) order.push_back(s.sequence_start(epoch * n + k));
    return order;
  };
  std::vector<int64_t> identity;
  for (int64_t k = 0; k < n; ++k) identity.push_back(k * kT);
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < 4; ++e) {
    epochs.push_back(epoch_order(sampler, e));
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    REQUIRE(sorted == identity);          // every sequence exactly once
    CHECK(epochs.back() != identity);      // actually shuffled
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);
  // Same seed, fresh instance, epochs visited out of order: same orders. Another seed: different.
  const GlobalSampler again(kTokens, kT, true, 1234);
  CHECK(epoch_order(again, 2) == epochs[2]);
  CHECK(epoch_order(again, 0) == epochs[0]);
  CHECK(epoch_order(again, 3) == epochs[3]);
  CHECK(epoch_order(GlobalSampler(kTokens, kT, true, 99), 0) != epochs[0]);
  // Alternating between epochs (a step straddling an epoch boundary) stays consistent.
  for (int64_t k = 0; k < 50; ++k) {
    REQUIRE(again.sequence_start(k) == epochs[0][static_cast<size_t>(k)]);
    REQUIRE(again.sequence_start(n + k) == epochs[1][static_cast<size_t>(k)]);
  }
}

TEST_CASE("too little data for one sequence names the shard files") {
  TempDir dir;
  write_token_shard(dir.file("tiny.bin"), std::vector<int32_t>(kT, 1), false);  // needs T + 1
  const TokenDataset dataset = TokenDataset::open(dir.file("tiny.bin"), 256, "data.val");
  const std::string message = user_error_message([&] { GlobalSampler(dataset, kT, false, 0); });
  CHECK_THAT(message, strata_catch::StartsWith("data.val"));
  CHECK_THAT(message, strata_catch::Contains(dir.file("tiny.bin")));
  CHECK_THAT(message, strata_catch::Contains("too little data: 16 tokens"));
  CHECK_THAT(message, strata_catch::Contains("seq_len + 1 = 17"));
  CHECK(GlobalSampler(dataset, kT - 1, false, 0).num_sequences() == 1);
}

TEST_CASE("read_sequences: inputs are the first T tokens, targets shifted by one") {
  TempDir dir;
  const TokenDataset dataset = make_dataset(dir);
  const GlobalSampler sampler(dataset, kT, false, 0);
  std::vector<int32_t> tokens(3 * kT), targets(3 * kT);
  read_sequences(dataset, sampler, 249, 3, tokens.data(), targets.data());  // 250*16 = 4000 crosses shards
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < kT; ++t) {
      REQUIRE(tokens[b * kT + t] == (249 + b) * kT + t);
      REQUIRE(targets[b * kT + t] == (249 + b) * kT + t + 1);
    }
  }
}

TEST_CASE("DP ranks partition each step's global batch in order and never overlap") {
  TempDir dir;
  const TokenDataset dataset = make_dataset(dir);
  const bool shuffle = GENERATE(false, true);
  const GlobalSampler sampler(dataset, kT, shuffle, 7);
  // G = 2 * 3 * 4 = 24 = 2 * 12 * 1; 30 steps cross the 625-sequence epoch boundary.
  BatchLoader single(dataset, sampler, BatchLayout{2, 12, 1, 0, kT}, false);
  std::vector<std::unique_ptr<BatchLoader>> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(std::make_unique<BatchLoader>(dataset, sampler, BatchLayout{2, 3, 4, r, kT}, r % 2 == 0));
  }
  for (int64_t step = 0; step < 30; ++step) {
    std::vector<Row> global, union_of_ranks;
    for (int m = 0; m < 12; ++m) {
      const MicroBatch batch = single.next();
      REQUIRE(batch.step == step);
      for (auto& row : rows_of(batch, 2)) global.push_back(row);
    }
    for (int r = 0; r < 4; ++r) {
      for (int m = 0; m < 3; ++m) {
        const MicroBatch batch = ranks[static_cast<size_t>(r)]->next();
        REQUIRE(batch.step == step);
        REQUIRE(batch.micro_index == m);
        for (auto& row : rows_of(batch, 2)) union_of_ranks.push_back(row);
      }
    }
    REQUIRE(union_of_ranks == global);  // rank r's slice is the r-th contiguous quarter
    // Disjoint: the rows are distinct sequences (their first tokens are distinct starts).
    std::set<int32_t> starts;
    for (const Row& row : union_of_ranks) starts.insert(row[0]);
    REQUIRE(starts.size() == union_of_ranks.size());
  }
}

TEST_CASE("prefetching loader yields exactly the synchronous loader's batches") {
  TempDir dir;
  const TokenDataset dataset = make_dataset(dir);
  const GlobalSampler sampler(dataset, kT, true, 3);
  const BatchLayout layout{4, 2, 2, 1, kT};
  BatchLoader plain(dataset, sampler, layout, false);
  BatchLoader prefetched(dataset, sampler, layout, true);
  for (int i = 0; i < 200; ++i) {
    const MicroBatch a = plain.next();
    const MicroBatch b = prefetched.next();
    REQUIRE(a.step == b.step);
    REQUIRE(a.micro_index == b.micro_index);
    REQUIRE(a.tokens == b.tokens);
    REQUIRE(a.targets == b.targets);
    REQUIRE(a.tokens.size() == 4 * kT);
    for (int k = 0; k + 1 < kT; ++k) REQUIRE(a.targets[static_cast<size_t>(k)] == a.tokens[static_cast<size_t>(k + 1)]);
  }
  CHECK(plain.next_step() == 100);
  CHECK(prefetched.next_step() == 100);
}

TEST_CASE("loader refuses a layout or sampler that does not fit the dataset") {
  TempDir dir;
  const TokenDataset dataset = make_dataset(dir);
  const GlobalSampler sampler(dataset, kT, false, 0);
  CHECK_THROWS_AS(BatchLoader(dataset, GlobalSampler(kTokens + kT, kT, false, 0), BatchLayout{1, 1, 1, 0, kT}, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(BatchLoader(dataset, sampler, BatchLayout{1, 1, 2, 2, kT}, true), std::invalid_argument);
  CHECK_THROWS_AS(BatchLoader(dataset, sampler, BatchLayout{1, 1, 1, 0, kT + 1}, true), std::invalid_argument);
  CHECK_THROWS_AS(BatchLoader(dataset, sampler, BatchLayout{0, 1, 1, 0, kT}, true), std::invalid_argument);
}

TEST_CASE("seek(s, s·G) resumes exactly where running to s would be") {
  TempDir dir;
  const TokenDataset dataset = make_dataset(dir);
  const GlobalSampler sampler(dataset, kT, true, 11);
  const BatchLayout layout{3, 2, 2, 0, kT};
  const bool prefetch = GENERATE(false, true);
  BatchLoader reference(dataset, sampler, layout, false);
  for (int i = 0; i < 2 * 9; ++i) reference.next();  // steps 0..8
  REQUIRE(reference.next_step() == 9);

  BatchLoader resumed(dataset, sampler, layout, prefetch);
  resumed.next();  // partway into step 0, then jump ahead (as a resume would)
  resumed.seek(9, reference.first_sequence_of(9));
  CHECK(reference.first_sequence_of(9) == 9 * 12);
  for (int i = 0; i < 8; ++i) {
    const MicroBatch expected = reference.next();
    const MicroBatch actual = resumed.next();
    REQUIRE(actual.step == expected.step);
    REQUIRE(actual.micro_index == expected.micro_index);
    REQUIRE(actual.tokens == expected.tokens);
    REQUIRE(actual.targets == expected.targets);
  }
  resumed.seek(2, 2 * 12);  // backwards too
  const MicroBatch again = resumed.next();
  CHECK(again.step == 2);
  CHECK(again.tokens == resumed.batch_at(2, 0).tokens);
  CHECK(resumed.next_step() == 2);
  CHECK(resumed.next_micro_index() == 1);
}

TEST_CASE("a resume with another global batch continues the data where the checkpoint stopped") {
  TempDir dir;
  const TokenDataset dataset = make_dataset(dir);
  const GlobalSampler sampler(dataset, kT, true, 5);
  // Saved with G = 3·2·2 = 12 after 7 steps: sequences [0, 84) are used.
  BatchLoader saved(dataset, sampler, BatchLayout{3, 2, 2, 1, kT}, false);
  const int64_t consumed = saved.first_sequence_of(7);
  REQUIRE(consumed == 84);
  // Resumed on one rank with G = 2·1·1 = 2: step 7 reads sequences 84, 85; step 8 reads 86, 87.
  const bool prefetch = GENERATE(false, true);
  BatchLoader resumed(dataset, sampler, BatchLayout{2, 1, 1, 0, kT}, prefetch);
  resumed.seek(7, consumed);
  for (int64_t step = 7; step < 10; ++step) {
    const MicroBatch batch = resumed.next();
    REQUIRE(batch.step == step);
    std::vector<int32_t> tokens(2 * kT), targets(2 * kT);
    read_sequences(dataset, sampler, 84 + 2 * (step - 7), 2, tokens.data(), targets.data());
    CHECK(batch.tokens == tokens);
    CHECK(batch.targets == targets);
  }
  CHECK(resumed.first_sequence_of(10) == 90);
  resumed.seek(7, 4);  // step 7 at sequence 4: step 4 would start before sequence 0
  CHECK_THROWS_AS(resumed.batch_at(4, 0), std::out_of_range);
}
