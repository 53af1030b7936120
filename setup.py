"""Maps the repository folders into the one ``cep_gpu`` namespace.

``kernels/`` installs as ``cep_gpu.kernels`` (the name ``kernels`` alone is taken on PyPI),
``spark_udfs/`` as ``cep_gpu.spark_udfs``, and ``cuda/*.cu(h)`` ships as package data of
``cep_gpu.cuda``.
"""

from setuptools import find_packages, setup

#: import name -> repository folder
FOLDERS = {
    "cep_gpu": "cep_gpu",
    "cep_gpu.kernels": "kernels",
    "cep_gpu.spark_udfs": "spark_udfs",
    "cep_gpu.cuda": "cuda",
}

setup(
    # every package under each folder (subpackages such as cep_gpu.events or cep_gpu.muse included)
    packages=[
        name
        for top, folder in FOLDERS.items()
        for name in [top, *(f"{top}.{sub}" for sub in find_packages(folder))]
    ],
    package_dir=FOLDERS,
    package_data={"cep_gpu": ["profiles/*.json"], "cep_gpu.language": ["*.lark"], "cep_gpu.cuda": ["*.cu", "*.cuh", "*.h"]},
    include_package_data=True,
)
