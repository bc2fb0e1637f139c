# airlock-vmm's jail backend (included by tests/integration/CMakeLists.txt): the static
# stand-in agent and the jail_* scripts (they need root).
add_subdirectory(jail_testinit)
foreach(t lifecycle sigkill pause hostile templates)
  airlock_script_test(NAME jail_${t} SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/jail_${t}.sh
                      LABELS vmm jail TIMEOUT 1500)
endforeach()
# A sandbox on a network made by the vswitch (needs its test tool).
airlock_script_test(NAME jail_vswitch SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/jail_vswitch.sh
                    LABELS vmm jail vswitch TIMEOUT 300)
