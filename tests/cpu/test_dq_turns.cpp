// A model of the backward's deterministic dQ protocol (dq_writer.cuh), run on the CPU: the writer of key
// block n walks its query blocks in the kernel's order (bwd_walk_begin), waits until the semaphore of
// the block's copy of the accumulator reaches its turn (bwd_dq_order), issues its adds, waits for them to
// land and passes the turn on (turn + 1) before its next step. CTAs start in tile-index order
// (bwd_key_block_of), at most `resident` at once, a new one as one finishes.
// The model runs the writers in every round-robin order of one action each and checks that every run
// finishes (no CTA waits on one that cannot move) and that each copy of each query block receives the adds
// of exactly its contributing key blocks (those of the copy's residue), from the highest key block down, so
// that the copies together hold every contributor once in a fixed order.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

#include "kernels/common/mask.hpp"
#include "launch/bwd_tile_config.hpp"

namespace flash4 {
namespace {

constexpr int kBlockM = 64;
constexpr int kBlockN = 128;

struct Step {
  int head;
  int m_block;
  BwdDqOrder order;
};

using BlockCopy = std::tuple<int, int, int>;  // (head, query block, copy)

// One key block's writer: its steps and how far it got.
struct Writer {
  std::vector<Step> steps;
  int next = 0;  // the step whose turn it waits for
  bool done = false;
};

std::vector<Step> writer_steps(const MaskSpec& mask, int n_block, int group_size, int copies) {
  std::vector<Step> steps;
  const QueryBlockRange queries = query_block_range(mask, n_block * kBlockN, kBlockN, kBlockM);
  for (int head = 0; head < group_size; ++head) {
    for (int i = bwd_walk_begin(queries, true); i < bwd_walk_end(queries, true); ++i) {
      const int m = bwd_walk_block(i);
      const int end = key_block_range(mask, m * kBlockM, kBlockM, kBlockN).end;
      steps.push_back({head, m, bwd_dq_order(n_block, end, copies)});
    }
  }
  return steps;
}

struct Outcome {
  bool finished = true;
  std::map<BlockCopy, std::vector<int>> adds;  // key blocks in add order
};

// `stride` varies which running writer moves next: the scan for one that can move starts `stride` further on
// after every action.
Outcome run_protocol(const MaskSpec& mask, int group_size, int copies, int resident, int stride) {
  const int n_blocks = (mask.seqlen_k + kBlockN - 1) / kBlockN;
  std::vector<Writer> writers(n_blocks);  // in tile-index (start) order
  for (int index = 0; index < n_blocks; ++index) {
    writers[index].steps = writer_steps(mask, bwd_key_block_of(index, n_blocks, true), group_size, copies);
  }
  std::map<BlockCopy, int> semaphore;
  Outcome outcome;
  int launched = 0;
  int running = 0;
  int cursor = 0;
  // One action of writer `index`: take its next turn if it has come (add, then pass it on), or finish.
  auto act = [&](int index) {
    Writer& w = writers[index];
    if (w.next == int(w.steps.size())) {
      w.done = true;
      return true;
    }
    const Step& step = w.steps[w.next];
    const BlockCopy target{step.head, step.m_block, step.order.copy};
    int& count = semaphore[target];
    if (count != step.order.turn) return false;
    outcome.adds[target].push_back(bwd_key_block_of(index, n_blocks, true));
    count = step.order.turn + 1;
    ++w.next;
    return true;
  };
  while (true) {
    while (launched < n_blocks && running < resident) {
      ++launched;
      ++running;
    }
    if (running == 0) return outcome;
    // Scan the launched writers from a start that moves by `stride` after every action.
    bool moved = false;
    cursor = (cursor + stride) % launched;
    for (int tries = 0; tries < launched && !moved; ++tries) {
      const int index = (cursor + tries) % launched;
      if (writers[index].done) continue;
      moved = act(index);
      if (writers[index].done) --running;
    }
    if (!moved) {
      outcome.finished = false;
      return outcome;
    }
  }
}

struct ProtocolCase {
  int seqlen_q, seqlen_k, left, right, group_size;
};

TEST(DqTurns, EveryRunFinishesAndAddsFromTheHighestKeyBlockDown) {
  const ProtocolCase cases[] = {{1024, 1024, -1, -1, 1}, {1024, 1024, -1, 0, 1}, {700, 1300, -1, 0, 2},
                                {1300, 700, -1, 0, 1},   {900, 900, 200, 0, 1},  {640, 1280, 100, 300, 2},
                                {1, 1000, -1, -1, 1},    {1000, 130, -1, 0, 3}};
  for (const ProtocolCase& c : cases) {
    const MaskSpec mask{c.seqlen_q, c.seqlen_k, c.left, c.right};
    const int n_blocks = (c.seqlen_k + kBlockN - 1) / kBlockN;
    for (int copies : {1, 2, bwd_dq_copies(true, n_blocks)}) {
      for (int resident : {1, 2, 3, n_blocks}) {
        for (int stride : {1, 2, 3, 5}) {
          SCOPED_TRACE(testing::Message() << "Sq " << c.seqlen_q << " Sk " << c.seqlen_k << " window (" << c.left
                                          << ", " << c.right << ") group " << c.group_size << " copies " << copies
                                          << " resident " << resident << " stride " << stride);
          const Outcome outcome = run_protocol(mask, c.group_size, copies, resident, stride);
          ASSERT_TRUE(outcome.finished) << "a writer waits for a turn that never comes";
          for (int head = 0; head < c.group_size; ++head) {
            for (int m = 0; m * kBlockM < c.seqlen_q; ++m) {
              const KeyBlockRange keys = key_block_range(mask, m * kBlockM, kBlockM, kBlockN);
              for (int copy = 0; copy < copies; ++copy) {
                std::vector<int> expected;
                for (int n = keys.end - 1; n >= keys.begin; --n) {
                  if (n % copies == copy) expected.push_back(n);
                }
                const auto found = outcome.adds.find({head, m, copy});
                const std::vector<int> got = found == outcome.adds.end() ? std::vector<int>{} : found->second;
                EXPECT_EQ(got, expected) << "head " << head << " query block " << m << " copy " << copy;
                // The postprocess reads exactly the copies whose first write (turn 0) happened.
                EXPECT_EQ(bwd_dq_copy_written(copy, keys.begin, keys.end, copies), !expected.empty())
                    << "head " << head << " query block " << m << " copy " << copy;
              }
            }
          }
        }
      }
    }
  }
}

TEST(DqTurns, CopyWrittenExactlyWhenAKeyBlockOfItsResidueContributes) {
  for (int copies = 1; copies <= 4; ++copies) {
    for (int begin = 0; begin < 12; ++begin) {
      for (int end = 0; end < 16; ++end) {
        for (int copy = 0; copy < copies; ++copy) {
          bool any = false;
          for (int n = begin; n < end; ++n) any = any || n % copies == copy;
          EXPECT_EQ(bwd_dq_copy_written(copy, begin, end, copies), any)
              << "copy " << copy << " of " << copies << ", key blocks [" << begin << ", " << end << ")";
        }
      }
    }
  }
}

// The point of the deterministic order: with a causal mask whose key blocks start on different query
// blocks, tiles that start together and take one step per round never wait for a turn. Each round every
// writer tries its step against the semaphores as the previous round left them (an add lands a round
// after it is issued).
int waits_in_lockstep(const MaskSpec& mask, int group_size, int copies) {
  const int n_blocks = (mask.seqlen_k + kBlockN - 1) / kBlockN;
  std::vector<Writer> writers(n_blocks);
  for (int index = 0; index < n_blocks; ++index) {
    writers[index].steps = writer_steps(mask, bwd_key_block_of(index, n_blocks, true), group_size, copies);
  }
  std::map<BlockCopy, int> semaphore;
  int waits = 0;
  for (bool busy = true; busy;) {
    busy = false;
    std::map<BlockCopy, int> landed = semaphore;
    for (Writer& w : writers) {
      if (w.next == int(w.steps.size())) continue;
      busy = true;
      const Step& step = w.steps[w.next];
      const BlockCopy target{step.head, step.m_block, step.order.copy};
      if (semaphore[target] != step.order.turn) {
        ++waits;
        continue;
      }
      landed[target] = step.order.turn + 1;
      ++w.next;
    }
    semaphore = landed;
  }
  return waits;
}

TEST(DqTurns, CausalTilesStartedTogetherNeverWait) {
  for (const auto& [seqlen_q, seqlen_k] : {std::pair{1024, 1024}, {2048, 2048}, {1500, 900}, {4096, 4096}}) {
    for (int group_size : {1, 2, 4}) {
      const MaskSpec mask{seqlen_q, seqlen_k, -1, 0};
      const int copies = bwd_dq_copies(true, (seqlen_k + kBlockN - 1) / kBlockN);
      EXPECT_EQ(waits_in_lockstep(mask, group_size, copies), 0)
          << "Sq " << seqlen_q << " Sk " << seqlen_k << " group " << group_size;
    }
  }
}

}  // namespace
}  // namespace flash4
