"""PEP 517 backend: scikit-build-core, plus the NVIDIA build wheels when CUDA is wanted.

GDL_ENABLE_CUDA=ON builds the CUDA backend (and fails if it cannot), OFF never does, and
AUTO (the default) builds it when this machine has an NVIDIA GPU (driver device or nvidia-smi).
"""

from __future__ import annotations

import os
import shutil

from scikit_build_core import build as _skb
from scikit_build_core.build import *  # noqa: F403

CUDA_BUILD_REQUIRES = [
    "cuda-toolkit[nvcc,cccl,cudart,cublas]==13.2.*",
    "nvidia-cudnn-cu13>=9",
    "nvidia-nccl-cu13>=2.27",
]


def _cuda_mode() -> str:
    mode = os.environ.get("GDL_ENABLE_CUDA", "AUTO").strip().upper()
    if mode in ("1", "ON", "TRUE", "YES"):
        return "ON"
    if mode in ("0", "OFF", "FALSE", "NO"):
        return "OFF"
    has_gpu = os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None
    return "ON" if has_gpu else "OFF"


def _extra(config_settings):
    return CUDA_BUILD_REQUIRES if _cuda_mode() == "ON" else []


def get_requires_for_build_wheel(config_settings=None):
    return _skb.get_requires_for_build_wheel(config_settings) + _extra(config_settings)


def get_requires_for_build_editable(config_settings=None):
    return _skb.get_requires_for_build_editable(config_settings) + _extra(config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    os.environ["GDL_ENABLE_CUDA"] = _cuda_mode()
    return _skb.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    os.environ["GDL_ENABLE_CUDA"] = _cuda_mode()
    return _skb.build_editable(wheel_directory, config_settings, metadata_directory)
