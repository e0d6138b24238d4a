// The quantized paged decode kernel's instantiations for turboquant_k8v4 (fp8 8-bit keys,
// uniform 4-bit values), head dims 64, 128 and 256: see decode_kernel.cuh.
#include "decode_kernel.cuh"

using tq::cuda::KeyKind;
using tq::cuda::ValueKind;
TQ_DECODE_INSTANTIATE(KeyKind::fp8, 8, ValueKind::uniform, 4)
