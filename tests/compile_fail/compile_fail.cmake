# A compile-fail test, run by ctest as `cmake -P compile_fail.cmake` (tests/CMakeLists.txt registers
# each with dp_add_compile_fail_test). SOURCE is compiled (syntax and templates only: -fsyntax-only)
# with the library's include directories and definitions:
#   1. once with -D${CONTROL}: it must compile, so the file itself is sound;
#   2. once per name in CASES, with -D<name>: each must fail, and the compiler's output must contain
#      EXPECT (the static_assert's message).
# try_compile() is not available to a script run with -P, hence the direct compiler call.
#
#   cmake -DCXX=c++ -DSTD=-std=gnu++20 -DINCLUDES=dir1|dir2 -DDEFINES=A=1|B -DSOURCE=x.cpp
#         -DCONTROL=NAME -DCASES=CASE1|CASE2 -DEXPECT=text -P compile_fail.cmake
foreach(var CXX SOURCE CONTROL CASES EXPECT)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "compile_fail.cmake: -D${var}=... is required")
  endif()
endforeach()
set(flags -fsyntax-only)
if(STD)
  list(APPEND flags ${STD})
endif()
string(REPLACE "|" ";" includes "${INCLUDES}")
foreach(dir IN LISTS includes)
  if(dir)
    list(APPEND flags "-I${dir}")
  endif()
endforeach()
string(REPLACE "|" ";" defines "${DEFINES}")
foreach(def IN LISTS defines)
  if(def)
    list(APPEND flags "-D${def}")
  endif()
endforeach()

function(compile define out_rc out_text)
  execute_process(COMMAND ${CXX} ${flags} -D${define} ${SOURCE}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_text} "${out}${err}" PARENT_SCOPE)
endfunction()

compile(${CONTROL} rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compile-fail control: ${SOURCE} with -D${CONTROL} should compile but did not (exit ${rc}):\n${text}")
endif()
message(STATUS "control (-D${CONTROL}) compiles")

string(REPLACE "|" ";" cases "${CASES}")
foreach(case IN LISTS cases)
  compile(${case} rc text)
  if(rc EQUAL 0)
    message(FATAL_ERROR "compile-fail case ${case}: ${SOURCE} compiled, but it must not")
  endif()
  string(FIND "${text}" "${EXPECT}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "compile-fail case ${case}: the compiler failed, but its output does not contain \"${EXPECT}\":\n${text}")
  endif()
  message(STATUS "case ${case}: fails to compile with the expected message")
endforeach()
