# The CMake package: this build installed into a fresh prefix (cmake --install), then tests/cmake_consumer,
# a project outside the tree, configured with find_package(tqkit), built and run.
source "$(dirname "$0")/lib.bash"
run cmake --install "$BUILD" --prefix "$TMP/prefix"
expect_rc 0
config=$(find "$TMP/prefix" -name tqkitConfig.cmake | head -1)
[ -n "$config" ] || fail "no tqkitConfig.cmake under the prefix"
[ -f "$TMP/prefix/include/tq/format.h" ] || fail "include/tq/format.h not installed"
run cmake -S "$SRC/tests/cmake_consumer" -B "$TMP/consumer" -DCMAKE_PREFIX_PATH="$TMP/prefix" -DCMAKE_BUILD_TYPE=Release
expect_rc 0
run cmake --build "$TMP/consumer" -j 2
expect_rc 0
run "$TMP/consumer/consumer"
expect_rc 0
expect_out "turboquant_4bit_nc: 134 bytes per token-head"
if grep -q "tqkit_HAVE_CUDA ON" "$config"; then expect_out "CUDA decode kernels: take this format"; fi
finish
