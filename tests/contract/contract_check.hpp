// One call of the contract fuzz test: a params struct through the validator (src/api/validate*.cpp, linked
// directly: no device, no dispatch), compared with the oracle (contract_oracle.hpp); for accepted params, the
// promises flash4.h makes about how they are read and what the host layer does with them:
//  - canonicalize gives params that validate again, are canonical already, and carry the header's reading
//    (causal -> right edge 0, max_seqlen no larger than the totals, windows past every key or query -> -1);
//  - the planners (forward and backward) count tiles and size the workspace as the oracle counts them, with
//    every count within int32's room, and the mask arithmetic they share with the kernels runs on the longest
//    sequences (an overflow there is undefined behaviour, which the sanitizer build turns into a crash);
//  - an empty problem's fills write outputs only.
#pragma once

#include <string>

#include "flash4/flash4.h"

namespace flash4::contract {

struct CallResult {
  flash4_status status;  // the validator's answer
  std::string broken;    // empty when everything holds; otherwise what broke, with the params
};

CallResult check_call(const flash4_fwd_params& params);
CallResult check_call(const flash4_bwd_params& params);

// Every field, for a failure's report.
std::string describe(const flash4_fwd_params& params);
std::string describe(const flash4_bwd_params& params);

}  // namespace flash4::contract
