// How far a CUDA op's 16-bit output may be from the CPU backend's, in ulps of the output's format
// (tests/lib/ulp_compare.h: judged at max(|expected|, mean |expected|)); fp32 outputs are held to
// 1e-5 relative. Shared by the GPU op tests and the emulator's attention tests.
#pragma once

namespace strata::gpu_test {

// Rounded once: both backends compute in fp32 or wider and round once to the output type.
// Values a hair apart in fp32 may round to neighbouring 16-bit values, never further apart.
inline constexpr double kRoundedOnceUlps = 1.0;

// A cuBLASLt GEMM may round intermediate sums to the output type (split-K partial sums reduced
// in it, the product before the C or bias epilogue); an H100 showed 2 at the tensor's mean
// magnitude where the reference rounds once.
inline constexpr double kGemmUlps = 4.0;

// cuBLASLt's GELU epilogue applies GELU to the unrounded pre-activation, the reference to the
// rounded one: half an ulp of the input through a slope of up to 1.13, where the input's ulp
// may be twice the output's (its binade is higher, or the output is judged at the tensor's
// mean magnitude), and the two outputs' own roundings. The exact epilogue of the emulator
// reaches 2.
inline constexpr double kGeluEpilogueUlps = 3.0;

// The tensor-core attention kernels round the probabilities P (and dP, dS in the backward) to
// the operand type before their products, as FlashAttention does, and the errors of up to a
// thousand keys add up. fp16 keeps 11 bits: 2⁻¹² per probability; the emulator reaches 9 ulps at
// T = 1024. bf16 splits each operand into a high and a low part (16 bits in all): it reaches 1.
inline constexpr double kAttentionF16Ulps = 16.0;
inline constexpr double kAttentionBf16Ulps = 2.0;
// bf16 operands rounded once (no split): 2⁻⁹ per probability; the emulator reaches 7.
inline constexpr double kAttentionRoundedOperandsUlps = 12.0;

}  // namespace strata::gpu_test
