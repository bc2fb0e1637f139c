# bench/audit: the audit log writer (common/auditlog).
add_executable(bench_audit_append ${CMAKE_CURRENT_LIST_DIR}/audit_append.c)
target_link_libraries(bench_audit_append PRIVATE airlock_common)
