# Helpers that keep every directory's CMakeLists.txt a few lines long.
#
#   braid_add_library(NAME graph SRCS graph.cc ... DEPS absl::status PUBLIC_DEPS ...)
#     -> target braid_graph, alias braid::graph, include root = repo root.
#   braid_add_test(NAME graph_test SRCS graph_test.cc DEPS braid::graph [LABELS gpu])
include_guard(GLOBAL)

function(braid_add_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(braid_${A_NAME} STATIC ${A_SRCS})
  add_library(braid::${A_NAME} ALIAS braid_${A_NAME})
  target_include_directories(braid_${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(braid_${A_NAME} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  target_compile_features(braid_${A_NAME} PUBLIC cxx_std_20)
endfunction()

function(braid_add_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  # gpu-labelled binaries get braid's main (base/gpu_test_main.cc): exit 77
  # only when every test skipped, which ctest reports as skipped
  # (SKIP_RETURN_CODE); one failed test fails the binary.
  if("gpu" IN_LIST A_LABELS)
    target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock braid_gpu_test_main)
  else()
    target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  endif()
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES TIMEOUT ${A_TIMEOUT})
  # Tests do not pick up the trained fused-op estimator that the repository
  # ships for one CPU (costmodel/gnn/checkpoints): their costs stay the same
  # on every machine. A test that wants it names it in its own environment.
  # Nor the measured profiles it ships (costmodel/profiles).
  set_tests_properties(${A_NAME} PROPERTIES ENVIRONMENT "BRAID_GNN_CHECKPOINT=none;BRAID_PROFILES=none")
  if(A_LABELS)
    set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}")
  endif()
  if("gpu" IN_LIST A_LABELS)
    set_tests_properties(${A_NAME} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

function(braid_add_binary)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# A directory library: every *.cc in the directory that is not a test
# (*_test.cc) or a program (*_main.cc) goes into braid_NAME; every *_test.cc
# becomes a test linked against it. Extra sources (internal/, generated) via SRCS.
#   braid_add_dir_library(NAME graph DEPS absl::status ... TEST_DEPS ...)
function(braid_add_dir_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS;PRIVATE_DEPS;TEST_DEPS;EXCLUDE" ${ARGN})
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  file(GLOB _tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  list(FILTER _srcs EXCLUDE REGEX "(_test|_main)\\.cc$")
  foreach(_ex ${A_EXCLUDE})
    list(FILTER _srcs EXCLUDE REGEX "/${_ex}$")
    list(FILTER _tests EXCLUDE REGEX "/${_ex}$")
  endforeach()
  braid_add_library(NAME ${A_NAME} SRCS ${_srcs} ${A_SRCS} DEPS ${A_DEPS} PRIVATE_DEPS ${A_PRIVATE_DEPS})
  foreach(_t ${_tests})
    get_filename_component(_tn ${_t} NAME_WE)
    braid_add_test(NAME ${_tn} SRCS ${_t} DEPS braid::${A_NAME} ${A_TEST_DEPS})
  endforeach()
endfunction()
