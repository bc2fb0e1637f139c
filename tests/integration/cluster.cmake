# Cluster integration tests (docs/cluster.md): airlockd's roles against a private PostgreSQL
# 15 that each test starts itself (tests/lib/pg.sh).
airlock_script_test(NAME cluster_node SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cluster_node.sh
                    LABELS controlplane cluster TIMEOUT 600)
airlock_script_test(NAME cluster_gateway SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cluster_gateway.sh
                    LABELS controlplane cluster TIMEOUT 600)
airlock_script_test(NAME cluster_manifests SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cluster_manifests.sh
                    LABELS controlplane cluster TIMEOUT 600)
airlock_script_test(NAME cluster_tls SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cluster_tls.sh
                    LABELS controlplane cluster TIMEOUT 600)
airlock_script_test(NAME cluster_policy SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cluster_policy.sh
                    LABELS controlplane cluster TIMEOUT 600)
