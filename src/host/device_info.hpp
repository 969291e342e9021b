// The few device properties the planner needs, queried once per device and cached.
#pragma once

#include <cstddef>
#include <string>

#include "flash4/flash4.h"

namespace flash4::host {

struct DeviceInfo {
  int ordinal = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  int major = 0;
  int minor = 0;
};

// The current device's properties; FLASH4_ERROR_NO_DEVICE (with a message) when there is no CUDA device
// or it is not sm_90 (the kernels are built for sm_90a only).
flash4_status current_device_info(DeviceInfo& info, std::string& message);

}  // namespace flash4::host
