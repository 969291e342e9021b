// CUDA runtime helpers of flash4-bench: failures as exceptions that name the call, and RAII owners of device
// memory, streams and events. The benchmark is a program, not the library: it may throw and exit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "flash4/flash4.hpp"

namespace flash4::bench {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A flash4 call that failed; main turns it into the exit status.
struct Flash4Error : std::runtime_error {
  explicit Flash4Error(const Status& status) : std::runtime_error(status.to_string()), code(status.code()) {}
  flash4_status code;
};

inline void check_cuda(cudaError_t error, const char* call) {
  if (error != cudaSuccess) throw CudaError(std::string(call) + ": " + cudaGetErrorString(error));
}

inline void check_flash4(const Status& status) {
  if (!status.ok()) throw Flash4Error(status);
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) { check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc"); }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }

  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { check_cuda(cudaEventCreate(&event_), "cudaEventCreate"); }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }

  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace flash4::bench
