# airlock-vmm's jail backend: create -> healthy latency (cold and warm), where the time goes,
# memory per idle sandbox, how many idle sandboxes the machine holds (bench/jail_bench.c).
if(TARGET airlock-vmm)
  airlock_bench(jail_bench jail_bench.c)
  target_link_libraries(jail_bench PRIVATE m)
  add_dependencies(jail_bench airlock-vmm jail_testinit)
  if(AIRLOCK_TESTS)
    add_test(NAME jail_bench_smoke COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/jail_bench_smoke.sh)
    set_tests_properties(jail_bench_smoke PROPERTIES LABELS "bench;vmm;jail" TIMEOUT 300
      ENVIRONMENT "AIRLOCK_BINARY_DIR=${CMAKE_BINARY_DIR};AIRLOCK_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  endif()
endif()
