// libFuzzer target for the GGUF reader: any input must parse or throw
// tq::Error — no crash, no sanitizer report, no unbounded allocation.
// Seeds: tests/data/gguf_corpus/. Run by ctest as fuzz_gguf_short (20 s).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tq/error.h"
#include "tq/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tq::GgufFile f = tq::GgufFile::from_memory(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
    for (const auto& [key, value] : f.metadata()) {
      (void)value.to_string();
      try {
        (void)f.get_u32(key);
      } catch (const tq::Error&) {
      }
    }
    std::vector<float> row;
    for (const auto& t : f.tensors()) {
      if (t.ne[0] > (1 << 16)) continue;  // keep each input cheap
      row.resize(size_t(t.ne[0]));
      for (int64_t r = 0; r < t.n_rows() && r < 64; ++r) f.dequantize_rows(t, r, 1, row.data());
    }
  } catch (const tq::Error&) {
  }
  return 0;
}
