// What a host launch step returns to the C ABI: a status and, on failure, a message that names the argument
// or the CUDA error. Shared by every direction's dispatch and by the helpers they use.
#pragma once

#include <string>

#include "flash4/flash4.h"

namespace flash4::host {

struct LaunchResult {
  flash4_status status = FLASH4_SUCCESS;
  std::string message;  // names the argument or the CUDA error when status != FLASH4_SUCCESS
};

}  // namespace flash4::host
