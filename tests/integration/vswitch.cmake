# vswitch integration tests (included by tests/integration/CMakeLists.txt).
add_executable(al-vswitch-tool vswitch_tool.c)
target_link_libraries(al-vswitch-tool PRIVATE airlock_vswitch)
foreach(t steering failclosed)
  airlock_script_test(NAME vswitch_${t}
    SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/vswitch_${t}.sh
    LABELS vswitch TIMEOUT 300)
endforeach()
# The lifecycle once per attach mode: TCX links and clsact filters (the default).
foreach(mode tcx clsact)
  airlock_script_test(NAME vswitch_lifecycle_${mode}
    SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/vswitch_lifecycle.sh
    LABELS vswitch TIMEOUT 300)
  set_property(TEST vswitch_lifecycle_${mode} APPEND PROPERTY ENVIRONMENT "VS_ATTACH=${mode}")
endforeach()
