# The vault: fetch latency over airlock-vault's socket, in-process and cache-hit references.
airlock_bench(bench_vault_fetch vault_fetch.c)
target_link_libraries(bench_vault_fetch PRIVATE airlock_vault airlock_intercept)
target_compile_definitions(bench_vault_fetch PRIVATE
                           AIRLOCK_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(bench_vault_fetch airlock-vault)
if(AIRLOCK_TESTS)
  add_test(NAME bench_vault_fetch_smoke COMMAND bench_vault_fetch --requests 500)
  set_tests_properties(bench_vault_fetch_smoke PROPERTIES LABELS "bench;vault" TIMEOUT 120)
endif()
