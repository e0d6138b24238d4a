// Packing of b-bit codes: one little-endian, LSB-first bit stream, code i at
// bits [b·i, b·i + b). For b = 4 this is "coordinate j in byte j>>1, even j in
// the low nibble"; for b = 3 it is vLLM's 3-bit layout (coordinate j at bit 3j);
// for b = 2 four codes per byte, code j at bits 2·(j%4) of byte j/4.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tq/formats/layouts.h"  // packed_bytes

namespace tq {

// out must hold packed_bytes(n, bits) bytes; it is fully overwritten.
void pack_bits(const uint8_t* codes, size_t n, int bits, uint8_t* out);
void unpack_bits(const uint8_t* in, size_t n, int bits, uint8_t* codes);

// Σ x_i² in a fixed halving-tree order (s_i += s_{i+h} for h = P/2, P/4, …, 1,
// P = next power of two ≥ n, zeros beyond n). The GPU kernels reduce in the same
// order, so norms — and everything quantized after them — are bit-identical.
float tree_sum_squares(const float* x, int n);
float tree_sum(const float* x, int n);

}  // namespace tq
