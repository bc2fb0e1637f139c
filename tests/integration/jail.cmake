# airlock-vmm's jail backend (included by tests/integration/CMakeLists.txt): the static
# stand-in agent and the jail_* scripts (they need root).
add_subdirectory(jail_testinit)
if(TARGET airlock-vmm)
  foreach(t lifecycle sigkill pause hostile templates)
    airlock_script_test(NAME jail_${t} SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/jail_${t}.sh
                        LABELS vmm jail TIMEOUT 1500)
  endforeach()
endif()
