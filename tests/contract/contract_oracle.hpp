// The validation rules of include/flash4/flash4.h, restated from its text as the oracle of the contract fuzz
// test: given a params struct, which status the library must answer and which argument its message must name.
// Written independently of src/api/validate*.cpp (no code shared, 128-bit arithmetic instead of checked
// 64-bit), so that a rule the validator gets wrong shows up as a disagreement.
#pragma once

#include <string>

#include "flash4/flash4.h"

namespace flash4::contract {

struct Verdict {
  flash4_status status = FLASH4_SUCCESS;
  std::string argument;  // the name a rejection's message starts with; empty on success
};

Verdict expected_verdict(const flash4_fwd_params& params);
Verdict expected_verdict(const flash4_bwd_params& params);

}  // namespace flash4::contract
