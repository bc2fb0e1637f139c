# Dependencies: Debian 12 packages (pkg-config), llhttp compiled from Debian's node-llhttp
# sources, and mbedtls 3.6 built by deploy/setup into .deps/mbedtls from Debian 13's
# source package. Everything becomes an imported target named airlock::<dep>.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

function(airlock_pkg name module)
  pkg_check_modules(${name} REQUIRED IMPORTED_TARGET GLOBAL ${module})
  add_library(airlock::${name} ALIAS PkgConfig::${name})
endfunction()

airlock_pkg(uv libuv)
airlock_pkg(sodium libsodium)
airlock_pkg(crypto libcrypto)
airlock_pkg(yaml yaml-0.1)
airlock_pkg(jansson jansson)
airlock_pkg(idn2 libidn2)
airlock_pkg(psl libpsl)
airlock_pkg(sqlite3 sqlite3)
# libpq: the cluster store (controlplane/cluster_db.c); only a configured cluster.database
# makes airlockd connect, a standalone airlockd only loads the library.
airlock_pkg(pq libpq)
airlock_pkg(bpf libbpf)
airlock_pkg(elf libelf)
airlock_pkg(check check)
airlock_pkg(nftables libnftables)
airlock_pkg(zstd libzstd)
airlock_pkg(mnl libmnl)

# llhttp: the C sources Debian ships in node-llhttp (llhttp 8.1), built strict (llhttp.cmake).
find_path(LLHTTP_INCLUDE_DIR llhttp.h PATHS /usr/share/include/llhttp /usr/include NO_DEFAULT_PATH)
find_file(LLHTTP_SRC_LLHTTP llhttp.c PATHS /usr/share/llhttp NO_DEFAULT_PATH)
find_file(LLHTTP_SRC_API api.c PATHS /usr/share/llhttp NO_DEFAULT_PATH)
find_file(LLHTTP_SRC_HTTP http.c PATHS /usr/share/llhttp NO_DEFAULT_PATH)
if(NOT LLHTTP_INCLUDE_DIR OR NOT LLHTTP_SRC_LLHTTP)
  message(FATAL_ERROR "llhttp sources not found: install Debian's node-llhttp (deploy/setup does)")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/llhttp.cmake)
airlock_llhttp_library(airlock_llhttp ${LLHTTP_INCLUDE_DIR}
                       ${LLHTTP_SRC_LLHTTP} ${LLHTTP_SRC_API} ${LLHTTP_SRC_HTTP})
add_library(airlock::llhttp ALIAS airlock_llhttp)

# mbedtls 3.6 (project-local prefix).
set(AIRLOCK_DEPS_DIR "${CMAKE_SOURCE_DIR}/.deps" CACHE PATH "Project-local dependencies (deploy/setup)")
find_package(MbedTLS 3.6 CONFIG PATHS ${AIRLOCK_DEPS_DIR}/mbedtls NO_DEFAULT_PATH)
if(NOT MbedTLS_FOUND)
  message(FATAL_ERROR "mbedtls 3.6 not found in ${AIRLOCK_DEPS_DIR}/mbedtls: run deploy/setup first")
endif()
add_library(airlock_mbedtls INTERFACE)
target_link_libraries(airlock_mbedtls INTERFACE MbedTLS::mbedtls MbedTLS::mbedx509 MbedTLS::mbedcrypto Threads::Threads)
add_library(airlock::mbedtls ALIAS airlock_mbedtls)

# Tools for the eBPF programs (vswitch).
find_program(AIRLOCK_CLANG NAMES clang clang-14)
find_program(AIRLOCK_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin)
