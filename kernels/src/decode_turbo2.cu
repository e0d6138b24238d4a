// The quantized paged decode kernel's instantiations for turbo2 (turbo 2-bit keys,
// turbo 2-bit values), head dims 64, 128 and 256: see decode_kernel.cuh.
#include "decode_kernel.cuh"

using tq::cuda::KeyKind;
using tq::cuda::ValueKind;
TQ_DECODE_INSTANTIATE(KeyKind::turbo, 2, ValueKind::turbo, 2)
