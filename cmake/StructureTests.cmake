# Structure tests: the direction of #include lines between the library's layers
# (scripts/check_layers.py; "Layers and the direction of includes" in docs/architecture.md) and
# the C++ style (scripts/format.sh --check). Included from the end of tests/CMakeLists.txt; they
# read the source tree only, so they build nothing (the style check takes about half a minute).
# The tests run python3 from PATH (/usr/bin/env), so look for that name (standard library only).
find_program(DP_PYTHON3 NAMES python3)
if(DP_PYTHON3)
  # A backward include that is not in scripts/layer-exceptions.txt, or an entry there that no
  # longer occurs, fails the suite.
  add_test(NAME Structure.IncludeDirection
           COMMAND /usr/bin/env python3 ${PROJECT_SOURCE_DIR}/scripts/check_layers.py
                   --root ${PROJECT_SOURCE_DIR})
  # The checker itself, on small trees in a temporary folder.
  add_test(NAME Structure.IncludeDirectionSelfTest
           COMMAND /usr/bin/env python3 ${PROJECT_SOURCE_DIR}/scripts/check_layers.py --self-test)
  set_tests_properties(Structure.IncludeDirection Structure.IncludeDirectionSelfTest
                       PROPERTIES TIMEOUT 60 LABELS structure)
else()
  message(STATUS "python3 not found: Structure.IncludeDirection (scripts/check_layers.py) is not registered")
endif()

# The C++ style (.clang-format; scripts/format.sh rewrites, --check lists what differs). Needs
# Debian's clang-format-14 (scripts/install-deps.sh installs it): another version formats some
# constructs differently.
find_program(DP_CLANG_FORMAT NAMES clang-format-14)
if(DP_CLANG_FORMAT)
  add_test(NAME Structure.Format COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/format.sh --check)
  set_tests_properties(Structure.Format PROPERTIES TIMEOUT 300 LABELS structure
                       ENVIRONMENT "CLANG_FORMAT=${DP_CLANG_FORMAT}")
else()
  message(STATUS "clang-format-14 not found: Structure.Format (scripts/format.sh --check) is not registered")
endif()
