# vswitch: root; builds its own network namespace (see bench/vswitch_bench.c).
airlock_bench(vswitch_bench vswitch_bench.c)
target_link_libraries(vswitch_bench PRIVATE airlock_vswitch)
if(AIRLOCK_TESTS)
  add_test(NAME vswitch_bench_smoke COMMAND vswitch_bench -n 3 -p 2 -m 4 -c 20)
  set_tests_properties(vswitch_bench_smoke PROPERTIES LABELS "bench;vswitch" TIMEOUT 120)
endif()
