# bench/egress: the egress proxy. bench/egress_bench.sh (root) runs egress_load (the load
# generator and fake upstreams) against airlock-egress, a direct path and nginx in a
# namespace world; egress_audit_append measures the proxy's audit path.
airlock_bench(egress_load egress_load.c)
target_link_libraries(egress_load PRIVATE airlock_egress_core)
airlock_bench(egress_audit_append egress_audit_append.c)
target_link_libraries(egress_audit_append PRIVATE airlock_egress)
if(AIRLOCK_TESTS)
  add_test(NAME egress_audit_append_smoke COMMAND egress_audit_append --records 20000)
  set_tests_properties(egress_audit_append_smoke PROPERTIES LABELS "bench;egress" TIMEOUT 120)
  add_test(NAME egress_bench_smoke COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/egress_bench.sh --quick
           --build ${CMAKE_BINARY_DIR})
  set_tests_properties(egress_bench_smoke PROPERTIES LABELS "bench;egress;integration" TIMEOUT 300)
endif()
