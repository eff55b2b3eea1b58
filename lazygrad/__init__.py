"""lazygrad: lazy tensors whose ops fuse into kernels you can read, time and tune."""
from lazygrad.dlpack import from_dlpack
from lazygrad.dtype import dtypes, finfo, iinfo
from lazygrad.knobs import Context
from lazygrad.stats import stats
from lazygrad.tensor import Tensor, manual_seed, no_grad
from lazygrad import fft  # noqa: E402  (torch.fft's place: the discrete Fourier transforms)

__all__ = ["Tensor", "dtypes", "finfo", "iinfo", "from_dlpack", "Context", "stats", "manual_seed", "no_grad", "fft"]
