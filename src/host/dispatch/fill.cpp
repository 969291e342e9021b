// Implements launch_fills (host/fill.hpp): checks the device, then enqueues each fill kernel (launch/fill.hpp).
#include <cuda_runtime.h>

#include <string>

#include "host/device_info.hpp"
#include "host/fill.hpp"

namespace flash4::host {
namespace {

LaunchResult cuda_failure(const char* name, cudaError_t status) {
  cudaGetLastError();  // a failed launch is not sticky; do not leave it for the caller's next check
  return LaunchResult{FLASH4_ERROR_CUDA, std::string("filling ") + name + " (empty problem): " +
                                             cudaGetErrorString(status)};
}

}  // namespace

LaunchResult launch_fills(const FillPlan& plan, flash4_stream_t caller_stream) {
  if (plan.empty()) return {};
  LaunchResult result;
  DeviceInfo device;
  result.status = current_device_info(device, result.message);
  if (result.status != FLASH4_SUCCESS) return result;
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(caller_stream);
  for (const ZeroFill& f : plan.zeros) {
    if (const cudaError_t status = launch_zero_fill(f, stream); status != cudaSuccess) return cuda_failure(f.name, status);
  }
  for (const FloatFill& f : plan.floats) {
    if (const cudaError_t status = launch_float_fill(f, stream); status != cudaSuccess) {
      return cuda_failure(f.name, status);
    }
  }
  return result;
}

}  // namespace flash4::host
