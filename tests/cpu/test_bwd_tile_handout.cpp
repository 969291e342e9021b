// A model of the backward's tile hand-out (kernels/sm90/bwd/kernel.cuh), run on the CPU with the kernel's
// own slot and phase arithmetic (BwdTileHandout). One CTA: a scheduler claims tiles and publishes each in
// slot n % 2; a loader, consumer warps and dQ writer warps wait for the slot, read it and arrive on
// tile_free; the loader and the consumers also pass the K / V barriers (kv_full, kv_empty) for the tiles
// that load K and V. The scheduler claims late: only once the slot is free and the loader has arrived on
// tile_loaded for the tile before. The mbarriers are modelled by their completed phases,
// a wait by the parity it names. Random interleavings of one action at a time check that
//  - every run finishes (no role waits on one that cannot move);
//  - no role ever finds its slot holding another tile while it works on one (no overwrite before all
//    readers are done), and every role sees every claimed tile, in claim order;
//  - no wait could pass on the wrong phase: a barrier is never a whole phase ahead of, or behind, the
//    phase a waiter means (the parity alone could not tell those apart).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/bwd_tile_handout.hpp"

namespace flash4 {
namespace {

using Handout = BwdTileHandout;

// An mbarrier: `expected` arrivals complete a phase.
struct Barrier {
  int expected = 1;
  int pending = 0;
  int completed = 0;

  void arrive() {
    if (++pending == expected) {
      pending = 0;
      ++completed;
    }
  }
  // A wait for phase `phase` (its parity given by the kernel's arithmetic) passes once that phase has
  // completed; the parity is only unambiguous while the barrier is at `phase` or just past it.
  bool passes(int phase, uint32_t parity) const {
    EXPECT_EQ(uint32_t(phase % 2), parity) << "the kernel waits on another phase than the model means";
    EXPECT_GE(completed, phase) << "a waiter is more than a phase ahead of its barrier";
    EXPECT_LE(completed, phase + 1) << "a barrier ran a whole phase past a waiter: its parity is ambiguous";
    return completed > phase;
  }
};

struct Tile {
  int index;
  bool loads_kv;  // has keys and steps (the others load no K / V)
};

struct Slot {
  int number = -1;  // the CTA's tile number it holds
  bool valid = false;
  Tile tile{};
  uint32_t kv_parity = 0;
};

struct Cta {
  std::vector<Tile> claims;  // what the counter hands this CTA, in order; then no tile left
  Slot slots[Handout::kSlots];
  Barrier published[Handout::kSlots];
  Barrier freed[Handout::kSlots];
  Barrier kv_full;
  Barrier kv_empty;
  Barrier loaded;
  std::vector<std::vector<int>> seen;  // per reader, the tile indices it worked on
};

// A role's position: the tile number it is at and how far into that tile.
struct Role {
  enum Kind { kScheduler, kLoader, kConsumer, kWriter } kind;
  int number = 0;
  int stage = 0;  // 0: waiting for the slot (scheduler: for it to be free); then kind-specific
  bool done = false;
  int kv_loads = 0;  // scheduler: tiles that loaded K / V; loader and consumers: those they passed
  int reader = -1;   // index into Cta::seen
};

// One action of `role` if it can move; false if it waits.
bool step(Cta& cta, Role& role) {
  const int slot = Handout::slot(role.number);
  Slot& held = cta.slots[slot];
  switch (role.kind) {
    case Role::kScheduler: {
      if (role.stage == 1) {  // the late claim: the loader has issued the previous tile's loads
        if (!cta.loaded.passes(role.number - 1, Handout::loaded_parity(role.number - 1))) return false;
        role.stage = 0;
        return true;
      }
      if (Handout::reuses_slot(role.number) &&
          !cta.freed[slot].passes(role.number / Handout::kSlots - 1, Handout::free_parity(role.number))) {
        return false;
      }
      const bool valid = role.number < int(cta.claims.size());
      held = Slot{role.number, valid, valid ? cta.claims[role.number] : Tile{}, Handout::kv_full_parity(role.kv_loads)};
      if (valid && held.tile.loads_kv) ++role.kv_loads;
      cta.published[slot].arrive();
      if (!valid) role.done = true;
      ++role.number;
      role.stage = 1;
      return true;
    }
    case Role::kLoader:
    case Role::kConsumer:
    case Role::kWriter: {
      if (role.stage == 0) {
        if (!cta.published[slot].passes(role.number / Handout::kSlots, Handout::published_parity(role.number))) {
          return false;
        }
        EXPECT_EQ(held.number, role.number) << "a reader found its slot holding another tile";
        if (!held.valid) {
          role.done = true;
          return true;
        }
        cta.seen[role.reader].push_back(held.tile.index);
        role.stage = 1;
        return true;
      }
      if (role.stage == 1 && held.tile.loads_kv && role.kind == Role::kLoader) {
        // Before loading, the previous load's K / V must be released.
        if (role.kv_loads > 0 &&
            !cta.kv_empty.passes(role.kv_loads - 1, Handout::kv_empty_parity(held.kv_parity))) {
          return false;
        }
        cta.kv_full.arrive();  // the bytes landed
        ++role.kv_loads;
      } else if (role.stage == 1 && held.tile.loads_kv && role.kind == Role::kConsumer) {
        if (!cta.kv_full.passes(role.kv_loads, held.kv_parity)) return false;
        ++role.kv_loads;
        cta.kv_empty.arrive();  // every product that read K and V is complete
      }
      EXPECT_EQ(held.number, role.number) << "the slot changed while a reader worked on its tile";
      if (role.kind == Role::kLoader) cta.loaded.arrive();
      cta.freed[slot].arrive();
      role.stage = 0;
      ++role.number;
      return true;
    }
  }
  return false;
}

// Runs one CTA to the end; `rng` picks which role moves next.
void run_cta(const std::vector<Tile>& claims, int consumers, int writers, std::mt19937& rng) {
  Cta cta;
  cta.claims = claims;
  std::vector<Role> roles{{Role::kScheduler}};
  roles.push_back({Role::kLoader});
  for (int c = 0; c < consumers; ++c) roles.push_back({Role::kConsumer});
  for (int w = 0; w < writers; ++w) roles.push_back({Role::kWriter});
  for (Role& role : roles) {
    if (role.kind != Role::kScheduler) role.reader = int(cta.seen.size()), cta.seen.emplace_back();
  }
  for (Barrier& b : cta.freed) b.expected = int(cta.seen.size());
  cta.kv_empty.expected = consumers;

  for (int actions = 0;; ++actions) {
    ASSERT_LT(actions, 100000) << "the protocol did not finish";
    std::vector<int> movable;
    for (int r = 0; r < int(roles.size()); ++r) {
      if (!roles[r].done) movable.push_back(r);
    }
    if (movable.empty()) break;
    std::shuffle(movable.begin(), movable.end(), rng);
    bool moved = false;
    for (int r : movable) {
      if (step(cta, roles[r])) {
        moved = true;
        break;
      }
    }
    ASSERT_TRUE(moved) << "deadlock: every unfinished role waits";
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<int> claimed;
  for (const Tile& t : claims) claimed.push_back(t.index);
  for (const std::vector<int>& seen : cta.seen) EXPECT_EQ(seen, claimed);
}

TEST(BwdTileHandout, EveryRoleSeesEveryClaimInOrderWithoutOverwriteOrAmbiguousPhase) {
  std::mt19937 rng(20261203);
  for (int trial = 0; trial < 800; ++trial) {
    std::vector<Tile> claims(rng() % 9);  // including none: the CTA's first tile may lie past the last
    for (std::size_t i = 0; i < claims.size(); ++i) claims[i] = Tile{int(100 * trial + i), rng() % 4 != 0};
    const int consumers = 1 + int(rng() % 3);
    const int writers = int(rng() % 3);
    SCOPED_TRACE("trial " + std::to_string(trial));
    run_cta(claims, consumers, writers, rng);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace flash4
