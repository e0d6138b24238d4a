// Catch2's implementation, without main() (tests/catch/CMakeLists.txt).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "run.h"

int tq::test::run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }
