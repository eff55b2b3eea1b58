"""lazygrad.distributed: data-parallel training over the processes of an MPI job.

    mpiexec -n 2 python train.py

    import lazygrad.distributed as dist
    dist.init()                                   # rank(), world_size()
    model = dist.DistributedDataParallel(model)   # rank 0's weights everywhere
    ...                                           # each rank: its share of the batch
    loss.backward()                               # gradients averaged over the ranks
    optimizer.step()                              # the same step on every rank

Collectives on Tensors: all_reduce (sum, mean, prod, max, min), broadcast, all_gather, barrier.
Each waits at most init(timeout=...) seconds for the other ranks, then raises DistributedTimeout;
an exception nothing catches ends the whole job. The transport is MPI through mpi4py
(`pip install 'lazygrad[mpi]'`, which brings MPICH as a wheel), so the same program runs on one
machine or across a cluster's nodes with that cluster's mpiexec.

Modules: mpi_backend.py (MPI requests with deadlines), collectives.py (the collectives as host
steps that the jit records), data_parallel.py (DistributedDataParallel).
"""
from lazygrad.distributed.collectives import (REDUCE_OPS, all_gather, all_reduce, barrier, broadcast, init,  # noqa: F401
                                              is_initialized, rank, world_size)
from lazygrad.distributed.data_parallel import DistributedDataParallel  # noqa: F401
from lazygrad.distributed.mpi_backend import DistributedError, DistributedTimeout  # noqa: F401
