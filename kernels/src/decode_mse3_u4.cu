// The quantized paged decode kernel's instantiations for turboquant_k3v4_nc (mse 3-bit keys,
// uniform 4-bit values), head dims 64, 128 and 256: see decode_kernel.cuh.
#include "decode_kernel.cuh"

using tq::cuda::KeyKind;
using tq::cuda::ValueKind;
TQ_DECODE_INSTANTIATE(KeyKind::mse, 3, ValueKind::uniform, 4)
