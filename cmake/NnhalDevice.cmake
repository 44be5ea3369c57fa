# The one helper every device folder calls.
#
#   nnhal_add_device(
#     NAME        vnpu                  # lower case [a-z0-9]+, unique
#     MODULE      vnpu_device.py        # defines register_vnpu_device() / unregister_vnpu_device()
#     DEFAULT     ON                    # is NNHAL_ENABLE_VNPU on unless told otherwise?
#     PACKAGES    numpy                 # Python packages the device needs (import names)
#     DESCRIPTION "one line, no semicolons")
#
# Declares option(NNHAL_ENABLE_<NAME>). When it is ON and a needed package is
# missing from NNHAL_TARGET_PYTHON, configuring fails naming the package and
# the option to turn off.
set_property(GLOBAL PROPERTY NNHAL_DEVICES "")

function(nnhal_add_device)
  cmake_parse_arguments(DEV "" "NAME;MODULE;DEFAULT;DESCRIPTION" "PACKAGES" ${ARGN})
  if(NOT DEV_NAME MATCHES "^[a-z0-9]+$")
    message(FATAL_ERROR "nnhal: device folder ${CMAKE_CURRENT_SOURCE_DIR}: NAME '${DEV_NAME}' must be [a-z0-9]+")
  endif()
  if(NOT DEV_MODULE STREQUAL "${DEV_NAME}_device.py")
    message(FATAL_ERROR "nnhal: device '${DEV_NAME}': MODULE must be ${DEV_NAME}_device.py, got '${DEV_MODULE}'")
  endif()
  if(NOT EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${DEV_MODULE}")
    message(FATAL_ERROR "nnhal: device '${DEV_NAME}': ${CMAKE_CURRENT_SOURCE_DIR}/${DEV_MODULE} does not exist")
  endif()
  if(NOT DEFINED DEV_DEFAULT)
    set(DEV_DEFAULT OFF)
  endif()
  string(TOUPPER "${DEV_NAME}" upper)
  set(opt "NNHAL_ENABLE_${upper}")
  option(${opt} "${DEV_DESCRIPTION}" ${DEV_DEFAULT})
  get_property(seen GLOBAL PROPERTY NNHAL_DEVICES)
  foreach(entry IN LISTS seen)
    if(entry MATCHES "^${DEV_NAME}\\|")
      message(FATAL_ERROR "nnhal: two device folders declare the name '${DEV_NAME}'")
    endif()
  endforeach()
  if(${opt})
    foreach(pkg IN LISTS DEV_PACKAGES)
      execute_process(
        COMMAND "${NNHAL_TARGET_PYTHON}" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${pkg}') is None)"
        RESULT_VARIABLE missing OUTPUT_QUIET ERROR_QUIET)
      if(NOT missing EQUAL 0)
        message(FATAL_ERROR
          "nnhal: device '${DEV_NAME}' needs the Python package '${pkg}', which ${NNHAL_TARGET_PYTHON} cannot import. "
          "Install '${pkg}', or switch the device off with -D${opt}=OFF.")
      endif()
    endforeach()
  endif()
  get_filename_component(folder "${CMAKE_CURRENT_SOURCE_DIR}" NAME)
  string(REPLACE ".py" "" module "${DEV_MODULE}")
  string(REPLACE ";" "," pkgs "${DEV_PACKAGES}")
  string(REPLACE ";" "," desc "${DEV_DESCRIPTION}")
  set_property(GLOBAL APPEND PROPERTY NNHAL_DEVICES
    "${DEV_NAME}|nnhal.device.${folder}.${module}|${opt}|${${opt}}|${DEV_DEFAULT}|${pkgs}|${desc}")
  message(STATUS "nnhal: device ${DEV_NAME}: ${opt}=${${opt}}")
endfunction()

function(nnhal_render_registry output)
  get_property(devices GLOBAL PROPERTY NNHAL_DEVICES)
  set(manifest "${CMAKE_CURRENT_BINARY_DIR}/nnhal_devices.txt")
  string(REPLACE ";" "\n" lines "${devices}")
  file(WRITE "${manifest}" "${lines}\n")
  execute_process(
    COMMAND "${Python_EXECUTABLE}" "${PROJECT_SOURCE_DIR}/tools/render_registry.py"
            --manifest "${manifest}" --source-dir "${PROJECT_SOURCE_DIR}" --output "${output}"
    RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR "nnhal: rendering the device registry failed (tools/render_registry.py)")
  endif()
  message(STATUS "nnhal: registry rendered to ${output}")
endfunction()
