// Runs Catch2's session (impl.cpp holds Catch2's implementation, the only file that can name Catch::Session).
#pragma once

namespace tq::test {
int run_catch(int argc, char** argv);
}  // namespace tq::test
