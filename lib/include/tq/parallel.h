// Work split over CPU threads (the model's forward pass, tq-bench --check-dump's float64
// reference).
#pragma once

#include <cstdint>
#include <functional>

namespace tq {

// n > 0: n; otherwise the machine's hardware threads (1 … 64).
int resolve_threads(int n);

// Runs fn(task) for task in [0, n_tasks) on up to n_threads threads (the
// calling thread included); tasks are handed out dynamically.
void parallel_for(int n_threads, int64_t n_tasks, const std::function<void(int64_t)>& fn);

}  // namespace tq
