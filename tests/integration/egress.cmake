# tests/integration/egress: worlds with a TPROXY stand-in for the vswitch (egress_world.sh),
# and one behind the real switch (egress_vswitch.sh).
# egress_abuse takes 220-310 s on 2 cores at load 15-25 (its floods wait on the proxy's
# clock, not the test's): its bound leaves it room.
foreach(t http tls dns abuse limits control audit narrow netupdate)
  set(timeout 300)
  if(t STREQUAL "abuse")
    set(timeout 900)
  endif()
  airlock_script_test(NAME egress_${t}
    SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/egress_${t}.sh
    LABELS egress TIMEOUT ${timeout})
endforeach()
# With al-vswitch-tool (tests/integration/vswitch.cmake).
airlock_script_test(NAME egress_vswitch
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/egress_vswitch.sh
  LABELS egress vswitch TIMEOUT 300)
# The same through one shared listening socket per address (the layout for kernels
# before 6.5, forced here with --listener-mode shared).
airlock_script_test(NAME egress_vswitch_shared
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/egress_vswitch.sh ARGS shared
  LABELS egress vswitch TIMEOUT 300)
