"""The package version (one home: ``cep_gpu.__version__`` and the kernel caches read it)."""

__version__ = "0.1.0"
