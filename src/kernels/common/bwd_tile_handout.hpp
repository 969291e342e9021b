// The backward's tile hand-out protocol (kernels/sm90/bwd/kernel.cuh): the slot protocol shared with the
// forward (tile_handout.hpp: the scheduler publishes the CTA's tile number n in slot n % 2; the other roles
// wait for tile_published, read the slot, and arrive on tile_free once done with it), plus the phases of
// the backward's own barriers (the loader arrives on tile_loaded first: the late claim, below). Host and
// device code, so that tests/cpu/test_bwd_tile_handout.cpp runs the protocol on these very functions.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"
#include "kernels/common/tile_handout.hpp"

namespace flash4 {

// The late claim: the scheduler claims the CTA's tile number n + 1 only once the loader has issued tile
// n's loads (tile_loaded), a few steps before the consumers finish it, so the next tile's K / V loads
// still overlap tile n's last steps. Claiming as the readers start tile n instead takes a tile away from
// the CTAs that start later: with more tiles than resident CTAs, a CTA may then hold two tiles while SMs
// idle at the end, and in deterministic mode a tile's successors in the dQ turns wait for it to start
// behind a whole other tile (docs/experiments.md, "late claim").
struct BwdTileHandout : TileHandout {
  // tile_loaded completes one phase per tile (the loader arrives after every tile, loads or none).
  FLASH4_HD static constexpr uint32_t loaded_parity(int number) { return uint32_t(number) % 2; }
  // The K / V barriers complete one phase per tile that loads K and V. kv_full's phase for such a tile is
  // the parity of the tiles that loaded before it; before loading, the loader waits for the previous
  // load's kv_empty phase, the other parity.
  FLASH4_HD static constexpr uint32_t kv_full_parity(int loads_before) { return uint32_t(loads_before) % 2; }
  FLASH4_HD static constexpr uint32_t kv_empty_parity(uint32_t kv_full_parity) { return kv_full_parity ^ 1u; }
};

}  // namespace flash4
