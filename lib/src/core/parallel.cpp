#include "tq/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace tq {

int resolve_threads(int n) {
  if (n > 0) return n;
  const unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : int(std::min(h, 64u));
}

void parallel_for(int n_threads, int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  const int t = int(std::min<int64_t>(n_threads, n_tasks));
  if (t <= 1) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n_tasks;) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(t - 1));
  for (int i = 1; i < t; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace tq
