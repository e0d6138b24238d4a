// The quantized paged decode kernel's instantiations for turbo3 (turbo 3-bit keys,
// turbo 3-bit values), head dims 64, 128 and 256: see decode_kernel.cuh.
#include "decode_kernel.cuh"

using tq::cuda::KeyKind;
using tq::cuda::ValueKind;
TQ_DECODE_INSTANTIATE(KeyKind::turbo, 3, ValueKind::turbo, 3)
