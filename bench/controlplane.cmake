# Control plane: cp_bench (root; builds its own network namespace and airlockd instance).
airlock_bench(cp_bench cp_bench.c)
target_link_libraries(cp_bench PRIVATE airlock_common)
if(AIRLOCK_TESTS)
  # A smoke run on airlockd's test backend (no sandboxes needed); the figures that count
  # come from `cp_bench` (jail backend, defaults) on a quiet machine with a Release build.
  add_test(NAME cp_bench_smoke COMMAND cp_bench -b test -n 3 -N 6 -c 3 -i 2 -m 0 -r 0)
  set_tests_properties(cp_bench_smoke PROPERTIES LABELS "bench;controlplane" TIMEOUT 300)
  # cp_ab.sh (interleaved runs of configurations, medians): one round of two, same backend;
  # the last configuration's median p95 line must be there.
  add_test(NAME cp_ab_smoke COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cp_ab.sh 1 "-k 1" "-k 2")
  set_tests_properties(cp_ab_smoke PROPERTIES LABELS "bench;controlplane" TIMEOUT 300
    ENVIRONMENT "CP_AB_BENCH=$<TARGET_FILE:cp_bench>;CP_AB_BASE=-b test -n 3 -N 6 -c 3 -i 2 -m 0 -r 0"
    PASS_REGULAR_EXPRESSION "\"config\": \"-k 2\", \"metric\": \"create_c3_p95\", \"median\": [0-9]")
endif()
