# The one helper every device folder calls.
#
#   nnhal_add_device(
#     NAME        vnpu                  # lower case [a-z0-9]+, unique
#     MODULE      vnpu_device.py        # defines register_vnpu_device() / unregister_vnpu_device()
#     DEFAULT     ON                    # is NNHAL_ENABLE_VNPU on unless told otherwise?
#     PACKAGES    numpy                 # Python packages the device needs (import names)
#     DESCRIPTION "one line, no semicolons")
#
# Declares option(NNHAL_ENABLE_<NAME>). Its value, first match wins:
#   1. -DNNHAL_ENABLE_<NAME>=ON|OFF (pip: -C cmake.define.NNHAL_ENABLE_<NAME>=ON),
#   2. the line <name>=ON|OFF of the devices file (NNHAL_DEVICES_FILE, by default
#      nnhal-devices.txt at the top of the tree, written by `nnhal registry`),
#   3. the folder's DEFAULT.
# PACKAGES are recorded, not checked: under pip's build isolation this Python is
# not the one nnhal will run in. nnhal.init() checks them and makes a device
# whose packages are missing unavailable, with the reason (see `nnhal devices`);
# `nnhal registry --enable` checks them before enabling.
set_property(GLOBAL PROPERTY NNHAL_DEVICES "")

# Read the devices file into NNHAL_CHOICE_<NAME> variables.
function(nnhal_read_device_choices file)
  if(NOT EXISTS "${file}")
    message(STATUS "nnhal: no devices file ${file}; device folders use their DEFAULT")
    return()
  endif()
  file(STRINGS "${file}" lines)
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    if(line STREQUAL "" OR line MATCHES "^#")
      continue()
    endif()
    if(NOT line MATCHES "^([a-z0-9]+)=(ON|OFF)$")
      message(WARNING "nnhal: ${file}: ignoring '${line}' (expected <device>=ON or <device>=OFF)")
      continue()
    endif()
    string(TOUPPER "${CMAKE_MATCH_1}" upper)
    set(NNHAL_CHOICE_${upper} "${CMAKE_MATCH_2}" PARENT_SCOPE)
    set_property(GLOBAL APPEND PROPERTY NNHAL_CHOICES "${CMAKE_MATCH_1}")
  endforeach()
  message(STATUS "nnhal: device choices from ${file}")
endfunction()

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
  set(initial ${DEV_DEFAULT})
  if(DEFINED NNHAL_CHOICE_${upper})
    set(initial ${NNHAL_CHOICE_${upper}})
  endif()
  option(${opt} "${DEV_DESCRIPTION}" ${initial})
  get_property(seen GLOBAL PROPERTY NNHAL_DEVICES)
  foreach(entry IN LISTS seen)
    if(entry MATCHES "^${DEV_NAME}\\|")
      message(FATAL_ERROR "nnhal: two device folders declare the name '${DEV_NAME}'")
    endif()
  endforeach()
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
  get_property(choices GLOBAL PROPERTY NNHAL_CHOICES)
  foreach(choice IN LISTS choices)
    if(NOT devices MATCHES "(^|;)${choice}\\|")
      message(WARNING "nnhal: the devices file names '${choice}', but no device folder declares it")
    endif()
  endforeach()
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
