// Marks functions that compile for both the host (tests, reference, planner) and the device (kernels).
#pragma once

#if defined(__CUDACC__)
#define FLASH4_HD __host__ __device__ __forceinline__
#else
#define FLASH4_HD inline
#endif
