// SHA-256 (FIPS 180-4), for recording which model file a dump came from.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tq {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::array<uint8_t, 32> finish();  // the object is spent afterwards
  static std::string hex(const std::array<uint8_t, 32>& digest);

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
// Hex digest of a file's contents (throws tq::Error naming the path).
std::string sha256_file(const std::string& path);

}  // namespace tq
