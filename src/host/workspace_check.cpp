#include "host/workspace_check.hpp"

#include <cstdint>

namespace flash4::host {

LaunchResult check_workspace(const void* workspace, std::size_t given, std::size_t needed, const std::string& need,
                             const char* size_function) {
  LaunchResult result;
  if (needed == 0) return result;
  if (workspace == nullptr || given < needed) {
    result.status = FLASH4_ERROR_INVALID_ARGUMENT;
    result.message = "workspace: " + need + " " + std::to_string(needed) + " bytes of device memory (got " +
                     (workspace == nullptr ? std::string("NULL") : std::to_string(given) + " bytes") +
                     "); size it with " + size_function;
  } else if (reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment != 0) {
    result.status = FLASH4_ERROR_MISALIGNED;
    result.message = "workspace: the address must be " + std::to_string(kWorkspaceAlignment) +
                     "-byte aligned (cudaMalloc and torch's allocator give that; an offset into a byte pool may not)";
  }
  return result;
}

}  // namespace flash4::host
