"""Reference models written once for any PyTorch-style `nn` namespace: ResNet-18 (`resnet.py`),
MobileNetV2 (`mobilenet.py`) and a MiniLM-sized BERT encoder (`bert.py`). Each builder takes the
namespace as its first argument, so `resnet18(lazygrad.nn)` is the lazygrad model and
`resnet18(torch.nn)` the same architecture in PyTorch, with identical `state_dict` names (those of
torchvision and Hugging Face's BertModel), so weights copy across by name. The forward passes use
only Tensor methods both libraries share; extra/bench/bench_models.py times them.
"""
from .bert import bert_mini_lm
from .mobilenet import mobilenet_v2
from .resnet import resnet18

__all__ = ["resnet18", "mobilenet_v2", "bert_mini_lm"]
