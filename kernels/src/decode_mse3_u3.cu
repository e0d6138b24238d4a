// The quantized paged decode kernel's instantiations for turboquant_3bit_nc (mse 3-bit keys,
// uniform 3-bit values), head dims 64, 128 and 256: see decode_kernel.cuh.
#include "decode_kernel.cuh"

using tq::cuda::KeyKind;
using tq::cuda::ValueKind;
TQ_DECODE_INSTANTIATE(KeyKind::mse, 3, ValueKind::uniform, 3)
