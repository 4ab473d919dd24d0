# DP_SANITIZE=address -> ASan + UBSan; DP_SANITIZE=thread -> TSan. Applied to every target.
# DP_SANITIZE_OPT: the optimisation and debug-information flags of a sanitizer build. -O1 -g (the
# default, scripts/sanitize.sh) gives the fastest instrumented programs and full debug information;
# -Og -g1 (scripts/test.sh's quick stage) compiles 1.7 to 1.8 times faster (measured on two library
# files: 27 s -> 12 s and 24 s -> 14 s, about a Release compile's cost) and still gives file:line.
set(DP_SANITIZE_OPT "-O1;-g" CACHE STRING "Optimisation and debug flags of a sanitizer build (a ;-list)")
if(DP_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined ${DP_SANITIZE_OPT})
  add_link_options(-fsanitize=address,undefined)
elseif(DP_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer ${DP_SANITIZE_OPT})
  add_link_options(-fsanitize=thread)
elseif(NOT DP_SANITIZE STREQUAL "")
  message(FATAL_ERROR "DP_SANITIZE must be empty, 'address' or 'thread' (got '${DP_SANITIZE}')")
endif()
