// The unit and model test runners' main().
#include "run.h"

int main(int argc, char** argv) { return tq::test::run_catch(argc, argv); }
