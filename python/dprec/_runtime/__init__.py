"""dprec's private runtime: what every mechanism stands on.

Top to bottom: :mod:`.updates` (a model update's named tensors: flatten and rebuild containers) and
:mod:`.wire` (what every message format shares: CRC, tensor-name digest), :mod:`.arrays` (every
array argument becomes one :class:`~.arrays.Array`), :mod:`.frameworks` (how NumPy, PyTorch, CuPy,
``__cuda_array_interface__`` and DLPack objects are read), :mod:`.dispatch` (one backend per call),
:mod:`.backends` (cpu, cuda, reference: the same operations), :mod:`.native` (loading the compiled
modules), and :mod:`.validation` (scalar argument checks, used at every level). The layering is
checked by ``tests/test_architecture.py``; the docs' Architecture page explains it.
"""
