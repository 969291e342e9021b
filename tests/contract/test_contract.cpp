// The contract fuzz test's own tests, and the findings of issue 28 that need the validator's internals (this
// target compiles src/api/validate*.cpp itself, with -fstrict-enums: see CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <variant>

#include "api/validate.hpp"
#include "contract/contract_check.hpp"
#include "contract/contract_oracle.hpp"
#include "contract/random_params.hpp"
#include "contract/seed_cases.hpp"
#include "host/planner.hpp"

namespace flash4::contract {
namespace {

const SeedCase& seed(const std::string& name) {
  static const std::vector<SeedCase> cases = seed_cases();
  for (const SeedCase& c : cases) {
    if (c.name == name) return c;
  }
  throw std::invalid_argument("no seed case " + name);
}

template <class Params>
const Params& params_of(const std::string& name) {
  return std::get<Params>(seed(name).params);
}

TEST(ContractSeeds, EveryCaseMeetsTheContract) {
  for (const SeedCase& c : seed_cases()) {
    EXPECT_EQ(std::visit([](const auto& p) { return check_call(p).broken; }, c.params), "") << c.name;
  }
}

TEST(ContractSeeds, RoundTripThroughTheCorpusEncoding) {
  for (const SeedCase& c : seed_cases()) {
    const std::vector<unsigned char> bytes = encode(c);
    const auto decoded = decode(bytes.data(), bytes.size());
    ASSERT_EQ(decoded.index(), c.params.index()) << c.name;
    std::visit([&](const auto& p) { EXPECT_EQ(std::memcmp(&p, &std::get<std::decay_t<decltype(p)>>(c.params), sizeof(p)), 0); },
               decoded);
  }
}

// Finding 3: with -fstrict-enums (this target's flag) the range check on a flash4_dtype load was folded away,
// and dtype 2, -1 and 255 were accepted.
TEST(ContractFindings, DtypeOutsideTheEnumIsRejected) {
  for (const std::int32_t raw : {2, -1, 255}) {
    const std::string suffix = " dtype " + std::to_string(raw);
    EXPECT_EQ(api::validate_fwd(params_of<flash4_fwd_params>("fwd" + suffix)).status, FLASH4_ERROR_UNSUPPORTED_DTYPE) << raw;
    EXPECT_EQ(api::validate_bwd(params_of<flash4_bwd_params>("bwd" + suffix)).status, FLASH4_ERROR_UNSUPPORTED_DTYPE) << raw;
  }
}

// Finding 2, forward: a max_seqlen_q of 2^31 - 1 passed validation, and the forward planner's (rows + 127) / 128
// overflowed to a negative tile count (one CTA launched, O never written). Read as flash4.h says, max_seqlen_q
// is bounded by total_q, and the plan covers every query block.
TEST(ContractFindings, ForwardPlanCoversEveryQueryBlockWhateverMaxSeqlen) {
  const flash4_fwd_params& p = params_of<flash4_fwd_params>("fwd varlen max_seqlen_q 2^31-1");
  ASSERT_TRUE(api::validate_fwd(p).ok());
  const flash4_fwd_params c = api::canonicalize(p);
  EXPECT_EQ(c.max_seqlen_q, p.total_q);
  const host::FwdPlan plan = host::plan_forward(c, host::DeviceInfo{0, 132, std::size_t{60} << 20, 9, 0});
  EXPECT_EQ(plan.order.num_tiles(), (p.total_q + plan.tile.block_m() - 1) / plan.tile.block_m());
  EXPECT_EQ(check_call(p).broken, "");
}

// Windows longer than every sequence read as unbounded, which keeps the kernels' mask sums within int32 (a
// window_right of 2^31 - 1 overflowed key_block_range's last_row + diagonal + window_right + 1).
TEST(ContractFindings, WindowsPastEverySequenceAreUnbounded) {
  const flash4_bwd_params c = api::canonicalize(params_of<flash4_bwd_params>("bwd windows of 2^31-1"));
  EXPECT_EQ(c.window_left, -1);
  EXPECT_EQ(c.window_right, -1);
  flash4_fwd_params causal = params_of<flash4_fwd_params>("fwd causal with window_right 16");
  EXPECT_EQ(api::canonicalize(causal).window_right, 0);
  EXPECT_EQ(api::canonicalize(causal).window_left, 64);
}

// The oracle can disagree: a validator that accepted everything, or named another argument, would be caught.
TEST(ContractOracle, RejectsWhatTheHeaderRejects) {
  EXPECT_EQ(expected_verdict(params_of<flash4_fwd_params>("fwd o head stride 8 at D=128")).argument, "o");
  EXPECT_EQ(expected_verdict(params_of<flash4_fwd_params>("fwd softcap 1e-45")).argument, "softcap");
  EXPECT_EQ(expected_verdict(params_of<flash4_bwd_params>("bwd dq aliasing dout")).status, FLASH4_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(expected_verdict(params_of<flash4_fwd_params>("fwd seqlen_q 2^31-1")).status, FLASH4_ERROR_SIZE_OVERFLOW);
  EXPECT_EQ(expected_verdict(params_of<flash4_fwd_params>("valid forward")).status, FLASH4_SUCCESS);
}

// The generator reaches every status and accepts a good share, so the planners are exercised.
TEST(ContractRandom, CoversEveryRejectionAndAcceptsOften) {
  RandomParams random(7);
  std::map<flash4_status, int> seen;
  constexpr int kCalls = 20000;
  for (int call = 0; call < kCalls; ++call) {
    const CallResult result = call % 2 ? check_call(random.bwd()) : check_call(random.fwd());
    ASSERT_EQ(result.broken, "") << "call " << call;
    ++seen[result.status];
  }
  for (const flash4_status status :
       {FLASH4_SUCCESS, FLASH4_ERROR_INVALID_STRUCT_SIZE, FLASH4_ERROR_NULL_POINTER, FLASH4_ERROR_UNSUPPORTED_DTYPE,
        FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, FLASH4_ERROR_HEAD_RATIO, FLASH4_ERROR_MISALIGNED, FLASH4_ERROR_INVALID_SIZE,
        FLASH4_ERROR_INVALID_MASK, FLASH4_ERROR_INVALID_VARLEN, FLASH4_ERROR_SIZE_OVERFLOW,
        FLASH4_ERROR_INVALID_ARGUMENT}) {
    EXPECT_GT(seen[status], 0) << "status " << status << " never reached";
  }
  EXPECT_GT(seen[FLASH4_SUCCESS], kCalls / 4);
}

}  // namespace
}  // namespace flash4::contract
