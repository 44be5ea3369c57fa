# nnhal_require_c_extension(<what>): the one check both of the cpu device's extension modules make before they
# build (source/device/cpu/native, source/device/cpu/qnative). A macro, not a function: find_package's variables
# (Python_EXECUTABLE, Python_add_library's targets) must reach the caller, and when a C compiler or Python's
# headers are missing, return() leaves the calling CMakeLists.txt with a warning that says <what> keeps to numpy.
macro(nnhal_require_c_extension what)
  include(CheckLanguage)
  check_language(C)
  if(NOT CMAKE_C_COMPILER)
    message(WARNING "nnhal: no C compiler found; ${what} keep(s) to numpy")
    return()
  endif()
  enable_language(C)
  find_package(Python 3.11 COMPONENTS Interpreter Development.Module)
  if(NOT Python_Development.Module_FOUND)
    message(WARNING "nnhal: Python's headers not found; ${what} keep(s) to numpy")
    return()
  endif()
endmacro()
