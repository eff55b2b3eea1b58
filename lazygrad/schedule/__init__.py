"""Scheduling: the lazy graph of a realize becomes kernels, fused where the contract allows
(`fuse.py`), each a `codegen.kernel.Kernel` for code generation."""
