"""DistributedDataParallel: one model per rank, each on its share of the batch, gradients averaged.

Front-end layer of lazygrad.distributed, on collectives.py. At construction the ranks check that
they hold the same parameters (names' shapes and dtypes) and take rank 0's values. Each parameter
gets a post-accumulate-grad hook (Tensor.register_post_accumulate_grad_hook); when a backward has
given every parameter its gradient, the gradients are averaged over the ranks in buckets of about
`bucket_bytes`, last layers first (the order backward finishes them): realizing a bucket's
gradients runs their backward kernels, then its all-reduce starts, and the next bucket's kernels
run while it travels. The averaged gradients replace `.grad`, so any optimizer steps the same
parameters on every rank. Under lazygrad.jit the all-reduces are host steps that every replay runs.
"""
from __future__ import annotations

from lazygrad.distributed import collectives
from lazygrad.nn.state import get_parameters, get_state_dict
from lazygrad.tensor import Tensor, no_grad

DEFAULT_BUCKET_BYTES = 25 << 20  # PyTorch's default bucket size


class DistributedDataParallel:
    """Wraps `module` (any lazygrad.nn model): calling the wrapper calls the module, and every
    backward through its parameters averages their gradients over the ranks.

        dist.init()
        model = DistributedDataParallel(build_model())
        loss = F.cross_entropy(model(images[dist.rank()::dist.world_size()]), ...)
        loss.backward()          # .grad now holds the average over every rank's batch
        optimizer.step()

    Every parameter must get a gradient in each backward (as PyTorch's default): one that gets none
    leaves the others un-averaged, and the next call raises, naming it."""

    def __init__(self, module, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        backend = collectives._require("DistributedDataParallel")
        if bucket_bytes <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_bytes must be positive, got {bucket_bytes}")
        self.module = module
        self.parameters = get_parameters(module)
        names = {id(tensor): name for name, tensor in get_state_dict(module).items()}
        self.names = [names.get(id(parameter), "?") for parameter in self.parameters]
        collectives._agree(backend, "DistributedDataParallel", tuple(
            (name, parameter.shape, parameter.dtype.name) for name, parameter in zip(self.names, self.parameters)))
        with no_grad():
            for parameter in self.parameters:
                parameter.assign(collectives.broadcast(parameter.detach(), 0)).realize()
        self._ready: set[int] = set()
        # in a world of one the gradients are already the mean: nothing to hook or send
        self.buckets = self._buckets(bucket_bytes) if backend.size > 1 else []
        for parameter in self.parameters if self.buckets else ():
            parameter.register_post_accumulate_grad_hook(self._gradient_ready)

    def _buckets(self, bucket_bytes: int) -> list[list[Tensor]]:
        """Parameters last to first, split where a bucket would pass bucket_bytes, and wherever the
        dtype changes (a bucket travels as one message of one dtype)."""
        buckets: list[list[Tensor]] = []
        size = 0
        for parameter in reversed(self.parameters):
            nbytes = parameter.numel() * collectives._wire_dtype(parameter.dtype).itemsize
            if not buckets or size + nbytes > bucket_bytes or parameter.dtype != buckets[-1][0].dtype:
                buckets.append([])
                size = 0
            buckets[-1].append(parameter)
            size += nbytes
        return buckets

    def __call__(self, *args, **kwargs):
        if self._ready:
            missing = [name for name, parameter in zip(self.names, self.parameters) if id(parameter) not in self._ready]
            self._ready.clear()
            raise RuntimeError(f"DistributedDataParallel: the last backward gave no gradient to {', '.join(missing)}, "
                               "so no gradient was averaged; every parameter must take part in the loss (or leave "
                               "it out of the model, or set requires_grad_(False))")
        return self.module(*args, **kwargs)

    def _gradient_ready(self, parameter: Tensor) -> None:
        self._ready.add(id(parameter))
        if len(self._ready) == len(self.parameters):
            self._ready.clear()
            self.average_gradients()

    def average_gradients(self) -> None:
        """Replaces every parameter's `.grad` with its mean over the ranks (backward does this)."""
        size = collectives.world_size()
        pending = [(bucket, collectives.start_all_reduce([parameter.grad for parameter in bucket], "sum",
                                                         "DistributedDataParallel all_reduce"))
                   for bucket in self.buckets]
        for bucket, reduce in pending:
            total = reduce.finish()
            offset = 0
            for parameter in bucket:
                count = parameter.numel()
                mean = total[offset:offset + count] / size
                parameter.grad = mean.reshape(parameter.shape).cast(parameter.grad.dtype)
                offset += count
