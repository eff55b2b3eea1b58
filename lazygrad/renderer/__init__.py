"""Renderers: a loop program (`loop_program.py`, made by lazygrad/codegen/) printed as the source of
one dialect: C for the CPU device (`c.py`), OpenCL C (`opencl.py`), CUDA C (`cuda.py`), sharing the
C family's syntax (`cstyle.py`) and the software narrow floats (`narrow_floats.py`)."""
