// A program that uses flash4 the way another project would: the installed headers, the C++ API and the shared
// library. It needs no GPU: it checks the library's version and that a malformed call is refused with a message.
// tools/check-packages.sh builds it through find_package(flash4 CONFIG) and through add_subdirectory.
#include <flash4/flash4.hpp>

#include <cstdio>
#include <cstring>

int main() {
  if (std::strcmp(flash4_version_string(), FLASH4_EXPECTED_VERSION) != 0) {
    std::fprintf(stderr, "consumer: libflash4 is version %s, expected %s\n", flash4_version_string(),
                 FLASH4_EXPECTED_VERSION);
    return 1;
  }
  flash4::Workspace workspace;  // the library's cudaMallocAsync allocator; allocates nothing until a launch needs it
  flash4_fwd_params params{};   // struct_size 0: refused before anything else is read
  const flash4::Status status = flash4::Status::from_c(flash4_fwd_check(&params));
  if (status.code() != FLASH4_ERROR_INVALID_STRUCT_SIZE || status.message().empty()) {
    std::fprintf(stderr, "consumer: expected FLASH4_ERROR_INVALID_STRUCT_SIZE with a message, got %s\n",
                 status.to_string().c_str());
    return 1;
  }
  std::printf("consumer (C++): flash4 %s; a zero struct_size gives %s\n", flash4_version_string(),
              status.to_string().c_str());
  return 0;
}
