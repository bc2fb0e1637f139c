# bench/vault: fetch latency over airlock-vault's socket (vault/).
if(TARGET airlock_vault)
  add_executable(bench_vault_fetch ${CMAKE_CURRENT_LIST_DIR}/vault_fetch.c)
  target_link_libraries(bench_vault_fetch PRIVATE airlock_vault)
  if(AIRLOCK_VAULT_HTTP)
    target_compile_definitions(bench_vault_fetch PRIVATE AIRLOCK_VAULT_HTTP=1)
    add_dependencies(bench_vault_fetch airlock-vault)
  endif()
endif()
