# airlock-vmm's jail backend: create -> healthy latency (cold and warm), where the time goes,
# memory per idle sandbox, how many idle sandboxes the machine holds (bench/jail_bench.c).
if(TARGET airlock-vmm)
  airlock_bench(jail_bench jail_bench.c)
  target_link_libraries(jail_bench PRIVATE m)
  add_dependencies(jail_bench airlock-vmm)
  # The test stand-in agent is only a fallback (no airlock-agent built); it exists only in a
  # build with the tests (-DAIRLOCK_TESTS=OFF used to fail to configure here).
  if(TARGET jail_testinit)
    add_dependencies(jail_bench jail_testinit)
  endif()
  if(AIRLOCK_TESTS)
    add_test(NAME jail_bench_smoke COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/jail_bench_smoke.sh)
    set_tests_properties(jail_bench_smoke PROPERTIES LABELS "bench;vmm;jail" TIMEOUT 300
      ENVIRONMENT "AIRLOCK_BINARY_DIR=${CMAKE_BINARY_DIR};AIRLOCK_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  endif()
endif()
