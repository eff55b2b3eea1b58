"""Reference models written once for any PyTorch-style `nn` namespace: ResNet-18 (`resnet.py`),
MobileNetV2 (`mobilenet.py`), a MiniLM-sized BERT encoder (`bert.py`), a small U-Net denoiser
(`unet.py`) and GPT-2 with its KV caches
and greedy generation (`gpt2.py`, imported from there: `from extra.models.gpt2 import gpt2`). Each builder takes the
namespace as its first argument, so `resnet18(lazygrad.nn)` is the lazygrad model and
`resnet18(torch.nn)` the same architecture in PyTorch, with identical `state_dict` names (those of
torchvision and Hugging Face's BertModel and GPT2LMHeadModel), so weights copy across by name (a
Hugging Face GPT-2 checkpoint's Conv1D weights transposed by `gpt2.from_hugging_face`). The
forward passes use only Tensor methods both libraries share; extra/bench/bench_models.py times them,
extra/bench/bench_generate.py GPT-2's decoding.
"""
from .bert import bert_mini_lm
from .mobilenet import mobilenet_v2
from .resnet import resnet18
from .unet import small_unet

__all__ = ["resnet18", "mobilenet_v2", "bert_mini_lm", "small_unet"]  # GPT-2: from extra.models.gpt2 import gpt2 (its module's name)
