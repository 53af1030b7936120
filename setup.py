"""Maps the repository folders into the one ``cep_gpu`` namespace.

``kernels/`` installs as ``cep_gpu.kernels`` (the name ``kernels`` alone is taken on PyPI),
``spark_udfs/`` as ``cep_gpu.spark_udfs``, and ``cuda/*.cu(h)`` ships as package data of
``cep_gpu.cuda``.
"""

from setuptools import setup

setup(
    packages=["cep_gpu", "cep_gpu.codegen", "cep_gpu.language", "cep_gpu.benchmarks", "cep_gpu.kernels", "cep_gpu.spark_udfs", "cep_gpu.cuda",
              "cep_gpu.parallel"],
    package_dir={
        "cep_gpu": "cep_gpu",
        "cep_gpu.kernels": "kernels",
        "cep_gpu.spark_udfs": "spark_udfs",
        "cep_gpu.cuda": "cuda",
    },
    package_data={"cep_gpu": ["profiles/*.json"], "cep_gpu.language": ["*.lark"], "cep_gpu.cuda": ["*.cu", "*.cuh", "*.h"]},
    include_package_data=True,
)
