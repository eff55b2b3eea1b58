"""Tensor's methods grouped by concept, one mixin class per module; lazygrad.tensor.Tensor inherits them all.

Front-end layer, under tensor.py. creation, elementwise, math_functions, reduce, movement, indexing,
linalg and nn hold the methods; helpers holds the argument checks they share. A mixin never imports
lazygrad.tensor at import time (tensor.py imports the mixins): a method that must name the Tensor
class imports it inside.
"""
