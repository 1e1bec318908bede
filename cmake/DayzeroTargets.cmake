# Helpers shared by every folder: one static library per concern, one test executable per test file.

set(DAYZERO_MPIEXEC ${MPIEXEC_EXECUTABLE})
# Oversubscribed CPU ranks on one machine; root needs Open MPI's explicit consent.
set(DAYZERO_MPI_TEST_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  "OMPI_MCA_rmaps_base_oversubscribe=1" "OPENBLAS_NUM_THREADS=1" "DAYZERO_THREADS=1")
# Under DAYZERO_SANITIZE=address LeakSanitizer fails every MPI process at exit on Open MPI's
# own allocations, made in dlopen()ed plugins it cannot symbolise (so no suppression file can
# name them): leak checking is off in the sanitized test environment, the rest of ASan is on.
# DAYZERO_SANITIZER_TEST_ENV also goes to the tests that start dayzero through the launch
# wrapper or Slurm, whose jobs inherit the test's environment.
set(DAYZERO_SANITIZER_TEST_ENV "")
if(DAYZERO_SANITIZE MATCHES "address")
  list(APPEND DAYZERO_SANITIZER_TEST_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()
list(APPEND DAYZERO_MPI_TEST_ENV ${DAYZERO_SANITIZER_TEST_ENV})

# dayzero_library(NAME dir-relative sources globbed; DEPS ...)
function(dayzero_library name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp ${CMAKE_CURRENT_SOURCE_DIR}/*/*.cpp)
  add_library(${name} STATIC ${srcs})
  # Unity build: a few files per translation unit. The headers every file includes
  # (nlohmann/json, spdlog, the standard library) cost more to compile than most files, so a fresh
  # build takes about half the time. The price: names in a file's anonymous namespace must be
  # unique within its library (shared helpers live in a header, e.g. core/strings.h).
  set_target_properties(${name} PROPERTIES UNITY_BUILD ${DAYZERO_UNITY_BUILD} UNITY_BUILD_BATCH_SIZE 8)
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(DAYZERO_HAS_MARCH_NATIVE)
    target_compile_options(${name} PRIVATE -march=native)
  endif()
  # GCC's -O2 cost model leaves simple element-wise loops scalar; the dynamic one vectorises them.
  if(DAYZERO_HAS_VECT_COST_MODEL)
    target_compile_options(${name} PRIVATE -fvect-cost-model=dynamic)
  endif()
endfunction()

# dayzero_test(FILE path.cpp DEPS libs... [MPI n] [TIMEOUT s] [FIXTURES f])
# A unit test runs alone; an MPI test runs under mpiexec -n N --oversubscribe.
function(dayzero_test)
  cmake_parse_arguments(ARG "" "FILE;MPI;TIMEOUT;NAME" "DEPS;FIXTURES;LABELS" ${ARGN})
  if(NOT ARG_NAME)
    get_filename_component(ARG_NAME ${ARG_FILE} NAME_WE)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${ARG_NAME} ${ARG_FILE})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${ARG_NAME} PRIVATE
    DAYZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}" DAYZERO_BINARY_DIR="${PROJECT_BINARY_DIR}"
    DAYZERO_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
  if(ARG_MPI)
    add_test(NAME ${ARG_NAME} COMMAND ${DAYZERO_MPIEXEC} -n ${ARG_MPI} --oversubscribe
             $<TARGET_FILE:${ARG_NAME}>)
  else()
    add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "${DAYZERO_MPI_TEST_ENV};DAYZERO_BIN=$<TARGET_FILE:dayzero>")
  if(ARG_FIXTURES)
    set_tests_properties(${ARG_NAME} PROPERTIES FIXTURES_REQUIRED "${ARG_FIXTURES}")
  endif()
  if(ARG_LABELS)
    set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

# dayzero_kernel_path_variants(TEST [FILTER gtest-filter])
# Runs TEST (a dayzero_test) again under each CPU kernel path a machine may take, each fixed by
# the environment (docs/testing.md, "Kernel paths"): the built-in GEMM kernel's instruction sets
# (DAYZERO_CPU_ISA, with the large-M path the built-in one too, so every product runs that
# instruction set's tiles) and each large-M library (DAYZERO_GEMM_LARGE_M, small M built-in at
# the widest instruction set). A test named TEST@isa=avx2 or TEST@large_m=onednn skips, with the
# reason, where this machine cannot run the path (`dayzero kernels --check`); FILTER narrows the
# cases a variant runs. Each variant has its own scratch folder.
function(dayzero_kernel_path_variants name)
  cmake_parse_arguments(ARG "" "FILTER" "" ${ARGN})
  get_test_property(${name} TIMEOUT timeout)
  set(args "")
  if(ARG_FILTER)
    set(args "--gtest_filter=${ARG_FILTER}")
  endif()
  set(variants "isa=generic" "isa=avx2" "isa=avx512" "large_m=openblas" "large_m=blis" "large_m=onednn")
  foreach(v ${variants})
    string(REPLACE "=" ";" kv "${v}")
    list(GET kv 0 kind)
    list(GET kv 1 value)
    if(kind STREQUAL "isa")
      set(env "DAYZERO_CPU_ISA=${value}" "DAYZERO_GEMM_LARGE_M=builtin")
    else()
      set(env "DAYZERO_GEMM_LARGE_M=${value}")
    endif()
    add_test(NAME "${name}@${v}" COMMAND ${name} ${args})
    set_tests_properties("${name}@${v}" PROPERTIES TIMEOUT ${timeout} LABELS "kernel-path"
      SKIP_REGULAR_EXPRESSION "kernel path not runnable here"
      ENVIRONMENT "${DAYZERO_MPI_TEST_ENV};DAYZERO_BIN=$<TARGET_FILE:dayzero>;${env};DAYZERO_SCRATCH_DIR=${PROJECT_BINARY_DIR}/e2e-scratch@${v}")
  endforeach()
endfunction()
