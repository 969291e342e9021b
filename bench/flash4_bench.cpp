// flash4-bench: times flash4's forward and/or backward on shapes from flags or the anchors' sweep and prints one
// line (or JSON object) per case. `flash4-bench --help` lists the flags and exit statuses; device_run.cpp does
// the measuring, cpu_demo.cpp what happens without a CUDA device.
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>

#include "cli.hpp"
#include "cpu_demo.hpp"
#include "cuda_util.hpp"
#include "device_run.hpp"

int main(int argc, char** argv) {
  using namespace flash4::bench;
  const Parsed parsed = parse_options(argc, argv);
  std::fputs(parsed.out.c_str(), stdout);
  std::fputs(parsed.err.c_str(), stderr);
  if (!parsed.options) return parsed.exit_code;
  const Options& options = *parsed.options;
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return run_without_device(options);
    return run_on_device(options);
  } catch (const Flash4Error& e) {
    std::fprintf(stderr, "flash4-bench: %s\n", e.what());
    if (e.code == FLASH4_ERROR_NOT_IMPLEMENTED) {
      std::fprintf(stderr, "flash4-bench: this flash4 build does not implement that mode yet\n");
      return kExitNotImplemented;
    }
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash4-bench: %s\n", e.what());
    return kExitError;
  }
}
