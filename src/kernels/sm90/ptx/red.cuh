// Fire-and-forget global reductions (red: no value comes back, so the issuing thread never waits).
#pragma once

namespace flash4::sm90 {

// *global += (x, y), one vector reduction over two adjacent floats (8-byte aligned; sm_90).
__device__ __forceinline__ void red_add_f32x2(float* global, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(global), "f"(x), "f"(y) : "memory");
}

}  // namespace flash4::sm90
