"""braid's Python client.

``braid.torch`` (this directory, client/python/braid/) enacts a braid plan inside
a PyTorch training script; ``braid.v1`` holds the gRPC stubs that
client/python/generate.sh writes into its own output directory. Both directories
carry a ``braid/__init__.py`` that extends the package path, so with both on
PYTHONPATH, in either order, ``import braid.torch`` and ``import braid.v1`` work:

  client/python/generate.sh build/python
  PYTHONPATH=client/python:build/python python3 -c "import braid.torch, braid.v1"
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
