# The optional CUDA backend, built from the NVIDIA wheels (nvcc, cudart, cuBLAS, cuDNN, NCCL).
# ON: missing pieces are an error. AUTO: missing pieces leave a CPU-only build with a warning.
# Included from the top level, so variables set here are in its scope.

set(_required OFF)
if(GDL_ENABLE_CUDA MATCHES "^(ON|on|1|TRUE|true)$")
  set(_required ON)
endif()

macro(gdl_cuda_missing what)
  if(_required)
    message(FATAL_ERROR "gdlbench: GDL_ENABLE_CUDA=ON but ${what}")
  endif()
  message(WARNING "gdlbench: CUDA backend skipped: ${what}")
  return()
endmacro()

# Locate the wheels' folders: nvidia/cu13 (nvcc, cudart, cuBLAS), nvidia/cudnn, nvidia/nccl.
py_query(_nv [=[
import importlib.util as u, pathlib
def where(name):
    try:
        s = u.find_spec(name)
    except ModuleNotFoundError:
        return ''
    return next(iter(s.submodule_search_locations), '') if s and s.submodule_search_locations else ''
print(';'.join(where(n) for n in ('nvidia.cu13', 'nvidia.cudnn', 'nvidia.nccl')))
]=])
list(GET _nv 0 NV_CU13)
list(GET _nv 1 NV_CUDNN)
list(GET _nv 2 NV_NCCL)

if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS "${NV_CU13}/bin/nvcc")
  set(CMAKE_CUDA_COMPILER "${NV_CU13}/bin/nvcc" CACHE FILEPATH "nvcc from the nvidia-cuda-nvcc wheel")
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  gdl_cuda_missing("no nvcc was found (pip install 'cuda-toolkit[nvcc,cccl,cudart,cublas]==13.2.*')")
endif()

foreach(_f "${NV_CU13}/include/cublas_v2.h" "${NV_CU13}/lib/libcublas.so.13" "${NV_CU13}/lib/libcublasLt.so.13"
           "${NV_CUDNN}/include/cudnn.h" "${NV_CUDNN}/lib/libcudnn.so.9"
           "${NV_NCCL}/include/nccl.h" "${NV_NCCL}/lib/libnccl.so.2")
  if(NOT EXISTS "${_f}")
    gdl_cuda_missing("${_f} is missing (pip install nvidia-cudnn-cu13 nvidia-nccl-cu13 'cuda-toolkit[cublas]==13.2.*')")
  endif()
endforeach()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90")   # explicit: 'native' fails without a GPU
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)

# The wheels hold only versioned libraries: imported targets with full paths.
function(gdl_imported name lib inc)
  add_library(${name} SHARED IMPORTED)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION "${lib}" INTERFACE_INCLUDE_DIRECTORIES "${inc}")
endfunction()
gdl_imported(gdl::cublas "${NV_CU13}/lib/libcublas.so.13" "${NV_CU13}/include")
gdl_imported(gdl::cublasLt "${NV_CU13}/lib/libcublasLt.so.13" "${NV_CU13}/include")
gdl_imported(gdl::cudnn "${NV_CUDNN}/lib/libcudnn.so.9" "${NV_CUDNN}/include")
gdl_imported(gdl::nccl "${NV_NCCL}/lib/libnccl.so.2" "${NV_NCCL}/include")

file(GLOB GDL_CUDA_SOURCES CONFIGURE_DEPENDS csrc/cuda/*.cu csrc/cuda/*.cpp)
# The node layout (two-level algorithms): the one MPI-side file both modules compile.
list(APPEND GDL_CUDA_SOURCES ${CMAKE_SOURCE_DIR}/csrc/comm/topology.cpp)
file(GLOB GDL_CUDA_BINDINGS CONFIGURE_DEPENDS csrc/bindings/bind_cuda*.cpp)
pybind11_add_module(_cuda MODULE ${GDL_CUDA_BINDINGS} ${GDL_CUDA_SOURCES})
target_include_directories(_cuda PRIVATE csrc)
target_compile_options(_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -O3>)
# nvcc finds its own headers (crt/host_defines.h, ...) for the .cu files; the .cpp bindings, compiled
# by the C++ compiler, reach cuda_runtime_api.h through the wheels' include folder, which lacks crt/
# when the nvcc is not a wheel's (the CUDA 13.0 runtime wheel without nvidia-cuda-crt, as on a
# machine with a system nvcc). Searched after every other folder, so the wheels' headers win.
foreach(_dir IN LISTS CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES)
  target_compile_options(_cuda PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-idirafter${_dir}>")
endforeach()
target_link_libraries(_cuda PRIVATE gdl_mpi gdl::cublas gdl::cublasLt gdl::cudnn gdl::nccl gdl_module_flags)
# The NVIDIA wheels beside gdlbench ($ORIGIN/..). With GDL_RPATH_BUILD_WHEELS=ON also where the
# build found them: for a venv that sees another environment's packages after its own, as
# scripts/gpu-check.sh's venv sees the GPU image's (off by default: with build isolation that
# folder is a temporary one).
option(GDL_RPATH_BUILD_WHEELS "also search the build environment's NVIDIA wheel folders at run time" OFF)
set(_cuda_rpath "$ORIGIN/../nvidia/cu13/lib;$ORIGIN/../nvidia/cudnn/lib;$ORIGIN/../nvidia/nccl/lib;${GDL_MPI_RPATH}")
if(GDL_RPATH_BUILD_WHEELS)
  list(APPEND _cuda_rpath "${NV_CU13}/lib" "${NV_CUDNN}/lib" "${NV_NCCL}/lib")
endif()
set_target_properties(_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Static INSTALL_RPATH "${_cuda_rpath}")
install(TARGETS _cuda LIBRARY DESTINATION gdlbench)
set(GDL_HAVE_CUDA ON)
