// tq-bench --check-dump: the GPU kernels (store, dequant, decode) on a tq-dump file's real queries, keys
// and values against the CPU encoder / decoder and float64 attention (tq/cuda/verify.h), or with
// --simulate-lut the decode's fp16 centroid LUT simulated in float64 on any machine.
#pragma once

#include <string>
#include <vector>

namespace tq::bench {

struct CheckDumpArgs {
  std::string file;                // --check-dump FILE
  std::string layers = "all";      // --layers
  int positions = 128;             // query positions decoded per layer
  int block_size = 16, splits = 0;  // the paged cache's tokens per page; split-KV (0: auto)
  std::vector<std::string> formats;  // --format (formats_given: else every format the decode has a kernel for)
  bool formats_given = false, simulate_lut = false, json = false;
};

// Everything the arguments and the file can be checked for is checked first, on any machine (tq::Error);
// returns 1 where a check failed, else 0.
int run_check_dump(const CheckDumpArgs& a);

}  // namespace tq::bench
