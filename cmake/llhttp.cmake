# The one llhttp configuration of the tree: strict mode (LLHTTP_STRICT_MODE=1: bare LF or CR
# anywhere in a message, a chunk whose data runs past its size, data after
# "Connection: close" and non-canonical URL bytes are errors), no lenient flag. Every
# component parses HTTP with it: airlockd, airlock-egress (plain and intercepted requests
# alike), airlock-vmm and the in-sandbox agent. It is compiled once per toolchain (the main
# build, the agent's unsanitized static build, the agent's musl build), always through
# this function; common/http_parser.h refuses to compile against any other configuration.
#
# Used by cmake/AirlockDeps.cmake and vmm/guest/static{,/musl}/CMakeLists.txt.
function(airlock_llhttp_library name include_dir)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} SYSTEM PUBLIC ${include_dir})
  # PUBLIC: whoever includes <llhttp.h> through a target that links this sees the mode.
  target_compile_definitions(${name} PUBLIC LLHTTP_STRICT_MODE=1)
  target_compile_options(${name} PRIVATE -w -O2)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
