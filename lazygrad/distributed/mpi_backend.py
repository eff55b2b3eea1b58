"""The MPI transport of lazygrad.distributed: mpi4py's nonblocking collectives on host arrays.

Bottom of the distributed data path: collectives.py hands it numpy arrays (a CPU buffer's own
memory, or a device buffer's host copy) and it runs MPI_Iallreduce, MPI_Ibcast or MPI_Iallgather on
MPI_COMM_WORLD, polling the request until it completes or `timeout` seconds pass. MPI itself would
wait forever for a rank that hung or called another collective; here the waiting ranks raise
DistributedTimeout instead, and an exception that nothing catches aborts the whole job
(MPI_Abort), so a rank that fails stops the others at once rather than at their timeout. A rank
killed outright is seen by `mpiexec`, which ends the job.

mpi4py is an optional dependency (`pip install lazygrad[mpi]`, which brings the MPICH runtime as
the `mpich` wheel); without `mpiexec` the process is a world of one.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from lazygrad.knobs import export_openmp_threads_default


class DistributedError(RuntimeError):
    """A collective that cannot run: not initialized, ranks that disagree on shapes or dtypes."""


class DistributedTimeout(DistributedError):
    """A collective that did not complete in time: another rank died, hung or called another one."""


class MPIBackend:
    """MPI_COMM_WORLD with a deadline on every wait."""

    def __init__(self, timeout: float):
        try:
            from mpi4py import MPI
        except ImportError as error:
            raise ImportError("lazygrad.distributed needs mpi4py and an MPI runtime: pip install 'lazygrad[mpi]' "
                              "(mpi4py with the mpich wheel), then launch with mpiexec -n N python script.py") from error
        self.mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout = timeout
        self.local_size = self.comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
        self._share_cores()
        self._abort_on_uncaught_exception()

    def _share_cores(self) -> None:
        """Ranks on one machine split its cores: OMP_NUM_THREADS, unless set, becomes cores / ranks
        here (read when the first kernel loads, so init() comes before any computation); with every
        rank on all cores they would take turns on them."""
        if self.local_size > 1:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            export_openmp_threads_default(max(1, cores // self.local_size))

    def _abort_on_uncaught_exception(self) -> None:
        """An exception that ends this rank's program ends the job: without it the other ranks would
        wait in their next collective until the timeout."""
        if self.size == 1 or getattr(sys.excepthook, "_lazygrad_aborts", False):
            return
        previous, comm = sys.excepthook, self.comm

        def abort(kind, value, traceback):
            previous(kind, value, traceback)
            sys.stdout.flush()
            sys.stderr.flush()
            time.sleep(0.2)  # mpiexec forwards the traceback before MPI_Abort takes the processes down
            comm.Abort(1)
        abort._lazygrad_aborts = True
        sys.excepthook = abort

    # ---- requests -------------------------------------------------------------------------------

    def wait(self, request, what: str) -> None:
        """Polls `request` until it completes; DistributedTimeout after `timeout` seconds. The first
        polls spin (a small all-reduce on one machine takes microseconds), later ones sleep up to a
        millisecond so a rank waiting for a slow one leaves its core to the kernels."""
        deadline, pause = time.monotonic() + self.timeout, 0.0
        while not request.Test():
            if time.monotonic() > deadline:
                raise DistributedTimeout(f"{what} did not complete within {self.timeout:g} s on rank {self.rank} of "
                                         f"{self.size}: another rank died, hung, or called a different collective. "
                                         "Every rank must call the same collectives in the same order; "
                                         "lazygrad.distributed.init(timeout=...) sets the limit")
            time.sleep(pause)
            pause = min(pause * 2 or 1e-6, 1e-3)

    def start_all_reduce(self, send: np.ndarray, receive: np.ndarray, op: str):
        ops = {"sum": self.mpi.SUM, "prod": self.mpi.PROD, "max": self.mpi.MAX, "min": self.mpi.MIN}
        return self.comm.Iallreduce(send, receive, op=ops[op])

    def start_broadcast(self, array: np.ndarray, source: int):
        return self.comm.Ibcast(array, root=source)

    def start_all_gather(self, send: np.ndarray, receive: np.ndarray):
        return self.comm.Iallgather(send, receive)
