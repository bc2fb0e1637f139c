# The tamper-evident log (common/auditlog): records/s with chain, checkpoints, group commit.
airlock_bench(bench_audit_append audit_append.c)
target_link_libraries(bench_audit_append PRIVATE airlock_common)
if(AIRLOCK_TESTS)
  add_test(NAME bench_audit_append_smoke COMMAND bench_audit_append --records 20000)
  set_tests_properties(bench_audit_append_smoke PROPERTIES LABELS "bench;common" TIMEOUT 120)
endif()
