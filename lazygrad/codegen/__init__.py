"""Code generation: a scheduled kernel (`kernel.py`, made by schedule/fuse.py) and its opts (`opts.py`:
the heuristic's, or BEAM's) become a loop program (`linearize.py`, with the dim bookkeeping of
`axes.py`), which a renderer (lazygrad/renderer/) prints as source for a device to compile."""
