# Test helpers. Every Check suite is its own executable and its own ctest test; each test
# case runs in its own process (Check's fork mode), as libuv's tests do.
#
#   airlock_check_test(NAME name SOURCES a.c b.c LIBS lib... [LABELS l...] [TIMEOUT s]
#                      [WRAP cmd...])   (WRAP: runs the suite as `cmd... suite`, e.g. under
#                                        tests/lib/pg.sh, which starts a private PostgreSQL)
#   airlock_script_test(NAME name SCRIPT path [ARGS ...] [LABELS l...] [TIMEOUT s])
#   airlock_fuzz_target(NAME name SOURCES f.c LIBS lib...)   (AIRLOCK_FUZZ=ON only)
# Each requires the fixture airlock_build_current (tests/build_current.sh): no test runs on a
# build older than its sources. Add fixtures with set_property(... APPEND PROPERTY ...).
function(airlock_check_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;WRAP" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} airlock::check)
  target_include_directories(${T_NAME} PRIVATE ${CMAKE_SOURCE_DIR}/tests/lib)
  add_test(NAME ${T_NAME} COMMAND ${T_WRAP} $<TARGET_FILE:${T_NAME}>)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "unit;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    FIXTURES_REQUIRED airlock_build_current ENVIRONMENT "CK_DEFAULT_TIMEOUT=60;AIRLOCK_SOURCE_DIR=${CMAKE_SOURCE_DIR};AIRLOCK_BINARY_DIR=${CMAKE_BINARY_DIR}")
endfunction()

function(airlock_script_test)
  cmake_parse_arguments(T "" "NAME;SCRIPT;TIMEOUT" "ARGS;LABELS" ${ARGN})
  add_test(NAME ${T_NAME} COMMAND ${T_SCRIPT} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "integration;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    FIXTURES_REQUIRED airlock_build_current ENVIRONMENT "AIRLOCK_SOURCE_DIR=${CMAKE_SOURCE_DIR};AIRLOCK_BINARY_DIR=${CMAKE_BINARY_DIR};AIRLOCK_BIN=${CMAKE_BINARY_DIR}/bin")
endfunction()

function(airlock_fuzz_target)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS" ${ARGN})
  if(AIRLOCK_FUZZ)
    add_executable(${T_NAME} ${T_SOURCES})
    target_compile_options(${T_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${T_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS})
    target_include_directories(${T_NAME} PRIVATE ${CMAKE_SOURCE_DIR}/tests/lib)
    set_property(GLOBAL APPEND PROPERTY AIRLOCK_FUZZ_TARGETS ${T_NAME})
  else()
    # Without libFuzzer the same entry point is driven over the seed corpus by a small
    # main (tests/lib/fuzz_main.c) and run as a regression test.
    add_executable(${T_NAME} ${T_SOURCES} ${CMAKE_SOURCE_DIR}/tests/lib/fuzz_main.c)
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS})
    target_include_directories(${T_NAME} PRIVATE ${CMAKE_SOURCE_DIR}/tests/lib)
    set(corpus ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${T_NAME})
    add_test(NAME ${T_NAME}_corpus COMMAND ${T_NAME} ${corpus})
    set_tests_properties(${T_NAME}_corpus PROPERTIES LABELS "unit;fuzz" TIMEOUT 300
      FIXTURES_REQUIRED airlock_build_current)
  endif()
endfunction()
