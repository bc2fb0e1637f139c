# TLS interception and credential injection (egress/intercept): the session engine, driven
# through icpt-proxy, against squid ssl-bump from Debian. icpt-proxy is built with the tests
# (tests/unit/egress/intercept), and so is this benchmark.
if(AIRLOCK_TESTS)
  airlock_bench(intercept_bench intercept_bench.c)
  target_link_libraries(intercept_bench PRIVATE airlock_intercept)
  target_compile_definitions(intercept_bench PRIVATE
                             AIRLOCK_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  add_dependencies(intercept_bench icpt-proxy)
  add_test(NAME bench_intercept_smoke COMMAND intercept_bench --quick --no-squid)
  set_tests_properties(bench_intercept_smoke PROPERTIES LABELS "bench;intercept" TIMEOUT 180)
endif()
