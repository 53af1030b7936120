# This folder installs as ``cep_gpu.cuda`` (package data: the CUDA sources). Where the repository
# root is on sys.path (``python -m pytest`` or ``python -c`` run there) it is also found as a
# top-level ``cuda``, which would hide NVIDIA's ``cuda`` namespace (cuda.bindings, cuda.pathfinder,
# imported by CuPy 14): extend the path so that the other ``cuda`` folders on sys.path still count.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
