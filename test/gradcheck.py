"""Central finite differences in float64: the reference every gradient test compares backward() with."""
import numpy as np

from lazygrad import Tensor, no_grad


def numeric_gradient(function, arrays, index, device, eps=1e-6):
    """d function(*arrays) / d arrays[index], one central difference per element."""
    grad = np.zeros_like(arrays[index])
    for position in np.ndindex(arrays[index].shape):
        values = []
        for sign in (1, -1):
            shifted = [array.copy() for array in arrays]
            shifted[index][position] += sign * eps
            with no_grad():
                values.append(function(*[Tensor(a, device=device) for a in shifted]).item())
        grad[position] = (values[0] - values[1]) / (2 * eps)
    return grad


def check_gradients(function, *arrays, device, rtol=1e-5, atol=1e-6):
    """backward() of a scalar function of float64 inputs agrees with finite differences."""
    tensors = [Tensor(array, device=device, requires_grad=True) for array in arrays]
    function(*tensors).backward()
    for index, tensor in enumerate(tensors):
        assert tensor.grad is not None, f"input {index} got no gradient"
        expected = numeric_gradient(function, arrays, index, device)
        np.testing.assert_allclose(tensor.grad.numpy(), expected, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {index}")
