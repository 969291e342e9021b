// What a validated empty problem (no query rows or no key rows in the whole call) writes. Attention over an
// empty key set is a fully masked row: O = 0 and LSE = -inf (the head's sink logit with sinks), as the kernel
// writes for a masked row. Its gradients are zero: O does not depend on q when there are no keys (dq = 0), keys
// no query attends to get no gradient (dk = dv = 0), and neither do the sinks. Tensors without rows are never
// touched.
//
//   forward   rows_q == 0                  nothing
//             rows_k == 0, rows_q > 0      o = 0, lse = -inf or the head's sink logit (when lse is set)
//   backward  rows_q == 0, rows_k == 0     dsink = 0 (when set), nothing else
//             rows_k == 0, rows_q > 0      dq = 0, dsink = 0
//             rows_q == 0, rows_k > 0      dk = 0, dv = 0, dsink = 0
//
// rows are batch * seqlen, or total_q / total_k for varlen. Empty sequences inside a non-empty varlen call are
// the kernel's to handle; the host cannot read cu_seqlens (device memory), so it fills all total_q rows.
// Pure host code: the plan is unit-tested without a GPU and run by launch_fills (host/fill.hpp).
#pragma once

#include "flash4/flash4.h"
#include "host/fill.hpp"

namespace flash4::host {

// Whether validated params are an empty problem: no query rows or no key rows in the whole call.
bool is_empty_problem(const flash4_fwd_params& params);
bool is_empty_problem(const flash4_bwd_params& params);

// The fills for validated params; an empty plan for a problem that is not empty (the kernel writes it).
FillPlan empty_problem_fills(const flash4_fwd_params& params);
FillPlan empty_problem_fills(const flash4_bwd_params& params);

}  // namespace flash4::host
