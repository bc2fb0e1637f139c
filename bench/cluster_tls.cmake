# The cluster's mutual TLS (controlplane/cluster_tls.c): data-plane throughput through a
# gateway's connector and a node's TLS front, against plain HTTP in the same run.
airlock_bench(cluster_tls_bench cluster_tls_bench.c)
target_link_libraries(cluster_tls_bench PRIVATE airlock_cp)
target_compile_definitions(cluster_tls_bench PRIVATE AIRLOCK_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
if(AIRLOCK_TESTS)
  add_test(NAME cluster_tls_bench_smoke COMMAND cluster_tls_bench 1 2)
  set_tests_properties(cluster_tls_bench_smoke PROPERTIES LABELS "bench;controlplane" TIMEOUT 120
    PASS_REGULAR_EXPRESSION "\"metric\":\"plain_upload_cpu_s_per_gib\"")
endif()
