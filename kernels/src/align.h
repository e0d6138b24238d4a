// Pointer alignment test shared by the launchers and their checks (internal).
#pragma once

#include <cstdint>

namespace tq::cuda {

inline bool is_aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace tq::cuda
