// Argument checks shared by the reference entry points (internal to src/reference).
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace flash4::ref::detail {

// Throws std::invalid_argument when a tensor does not hold exactly the elements the problem implies.
inline void check_size(std::span<const float> tensor, std::size_t expected, const char* name) {
  if (tensor.size() != expected) {
    throw std::invalid_argument(std::string("flash4::ref: ") + name + " has " + std::to_string(tensor.size()) +
                                " elements, the problem needs " + std::to_string(expected));
  }
}

}  // namespace flash4::ref::detail
