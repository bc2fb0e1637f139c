# airlock-agent integration tests (included by tests/integration/CMakeLists.txt).
airlock_script_test(NAME agent_token SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/agent_token.sh
                    LABELS agent TIMEOUT 60)
airlock_script_test(NAME agent_startcmd SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/agent_startcmd.sh
                    LABELS agent TIMEOUT 120)
