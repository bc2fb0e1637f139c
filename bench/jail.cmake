# airlock-vmm's jail backend: create -> healthy latency (cold and warm), where the time goes,
# memory per idle sandbox, how many idle sandboxes the machine holds (bench/jail_bench.c).
airlock_bench(jail_bench jail_bench.c)
target_link_libraries(jail_bench PRIVATE m)
add_dependencies(jail_bench airlock-vmm)
if(AIRLOCK_TESTS)
  # The smoke run's stand-in agent (tests/integration/jail_testinit), built with the tests.
  add_dependencies(jail_bench jail_testinit)
  add_test(NAME jail_bench_smoke COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/jail_bench_smoke.sh)
  set_tests_properties(jail_bench_smoke PROPERTIES LABELS "bench;vmm;jail" TIMEOUT 300
    ENVIRONMENT "AIRLOCK_BINARY_DIR=${CMAKE_BINARY_DIR};AIRLOCK_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endif()
