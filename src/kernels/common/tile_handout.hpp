// The slot protocol by which a persistent CTA's scheduling thread hands each tile it claims to the CTA's
// other roles: the CTA's n-th tile goes into shared-memory slot n % kSlots; the scheduler arrives on that
// slot's tile_published barrier once the slot is written, every reader waits for it, reads the slot and
// arrives on tile_free once done with it, and the scheduler reuses the slot for tile n + kSlots only after
// that tile_free phase. Two slots let the scheduler publish tile n + 1 while tile n is being read, so a
// claim never waits for the readers to finish a tile. Host and device code: the CPU tests run the
// protocol on these very functions.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"

namespace flash4 {

struct TileHandout {
  static constexpr int kSlots = 2;

  FLASH4_HD static constexpr int slot(int number) { return number % kSlots; }
  // The parity of the slot's tile_published phase that completes when tile `number` is published (the
  // slot's (number / kSlots)-th).
  FLASH4_HD static constexpr uint32_t published_parity(int number) { return uint32_t(number / kSlots) % 2; }
  // Tile `number` reuses its slot after tile number - kSlots: the scheduler first waits for that tile's
  // tile_free phase.
  FLASH4_HD static constexpr bool reuses_slot(int number) { return number >= kSlots; }
  FLASH4_HD static constexpr uint32_t free_parity(int number) { return uint32_t(number / kSlots - 1) % 2; }
};

}  // namespace flash4
