// The quantized paged decode kernel's instantiations for turbo4-qjl (turbo_qjl 3-bit keys,
// turbo_qjl 3-bit values), head dims 64, 128 and 256: see decode_kernel.cuh.
#include "decode_kernel.cuh"

using tq::cuda::KeyKind;
using tq::cuda::ValueKind;
TQ_DECODE_INSTANTIATE(KeyKind::turbo_qjl, 3, ValueKind::turbo_qjl, 3)
