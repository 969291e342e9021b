// The backward's tile hand-out protocol (kernels/sm90/bwd/kernel.cuh), as the slot and mbarrier phase
// arithmetic its roles share: the scheduler publishes the CTA's tile number n in slot n % 2; the other
// roles wait for tile_published, read the slot, and arrive on tile_free once done with it (the loader
// first on tile_loaded: the late claim, below). Host and device code, so that
// tests/cpu/test_bwd_tile_handout.cpp runs the protocol on these very functions.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"

namespace flash4 {

// The late claim: the scheduler claims the CTA's tile number n + 1 only once the loader has issued tile
// n's loads (tile_loaded), a few steps before the consumers finish it, so the next tile's K / V loads
// still overlap tile n's last steps. Claiming as the readers start tile n instead takes a tile away from
// the CTAs that start later: with more tiles than resident CTAs, a CTA may then hold two tiles while SMs
// idle at the end, and in deterministic mode a tile's successors in the dQ turns wait for it to start
// behind a whole other tile (docs/experiments.md, "late claim").
struct BwdTileHandout {
  static constexpr int kSlots = 2;

  FLASH4_HD static constexpr int slot(int number) { return number % kSlots; }
  // The parity of the slot's tile_published phase that completes when tile `number` is published (the
  // slot's (number / kSlots)-th).
  FLASH4_HD static constexpr uint32_t published_parity(int number) { return uint32_t(number / kSlots) % 2; }
  // Tile `number` reuses its slot after tile number - kSlots: the scheduler first waits for that tile's
  // tile_free phase.
  FLASH4_HD static constexpr bool reuses_slot(int number) { return number >= kSlots; }
  FLASH4_HD static constexpr uint32_t free_parity(int number) { return uint32_t(number / kSlots - 1) % 2; }
  // tile_loaded completes one phase per tile (the loader arrives after every tile, loads or none).
  FLASH4_HD static constexpr uint32_t loaded_parity(int number) { return uint32_t(number) % 2; }
  // The K / V barriers complete one phase per tile that loads K and V. kv_full's phase for such a tile is
  // the parity of the tiles that loaded before it; before loading, the loader waits for the previous
  // load's kv_empty phase, the other parity.
  FLASH4_HD static constexpr uint32_t kv_full_parity(int loads_before) { return uint32_t(loads_before) % 2; }
  FLASH4_HD static constexpr uint32_t kv_empty_parity(uint32_t kv_full_parity) { return kv_full_parity ^ 1u; }
};

}  // namespace flash4
