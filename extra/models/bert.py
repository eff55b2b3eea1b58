"""A BERT encoder (Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers") for any
PyTorch-style `nn`, by default of MiniLM-L6's size.

    model = bert_mini_lm(lazygrad.nn).eval()          # or bert_mini_lm(torch.nn)
    hidden = model(input_ids, attention_mask)         # (batch, tokens, 384): the last hidden state

The layout and parameter names are Hugging Face's `BertModel` (so a checkpoint such as
all-MiniLM-L6-v2 loads by name): `embeddings` (word, position and token-type Embeddings, summed, then
LayerNorm), `encoder.layer.N` of `attention.self` (query, key, value), `attention.output` (dense,
LayerNorm), `intermediate.dense` with GELU and `output` (dense, LayerNorm), each sublayer
post-normalized around its residual add; `pooler` only with add_pooling_layer=True (then forward
returns the pooled first token too). attention_mask is 1 for real tokens and 0 for padding; padded
keys get the float32 minimum added to their scores, as BertModel's eager attention does. Position
ids are 0..tokens-1 and token types 0 unless given. Dropout layers are there for training and pass
through in eval mode.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

FLOAT32_MIN = -3.4028234663852886e38  # torch.finfo(torch.float32).min, BertModel's mask value


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1


def _creation_functions(nn):
    """Where creation functions (`arange`, `zeros_like`, `cat`, `rand`) live for a namespace: the torch
    module for torch.nn, lazygrad's Tensor class for lazygrad.nn (both spell them the same way)."""
    if nn.__name__.startswith("torch"):
        import torch
        return torch
    from lazygrad import Tensor
    return Tensor


@functools.cache
def _classes(nn):
    """The BertModel classes built on `nn` (lazygrad.nn or torch.nn), once per namespace."""
    creation = _creation_functions(nn)

    class BertEmbeddings(nn.Module):
        def __init__(self, config: BertConfig):
            super().__init__()
            self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

        def forward(self, input_ids, token_type_ids=None, position_ids=None):
            batch, tokens = input_ids.shape
            if position_ids is None:
                position_ids = creation.arange(tokens, device=input_ids.device).reshape(1, tokens)
            if token_type_ids is None:
                token_type_ids = creation.zeros_like(input_ids)
            embedded = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
                        + self.position_embeddings(position_ids))
            return self.dropout(self.LayerNorm(embedded))

    class BertSelfAttention(nn.Module):
        def __init__(self, config: BertConfig):
            super().__init__()
            self.num_attention_heads = config.num_attention_heads
            self.attention_head_size = config.hidden_size // config.num_attention_heads
            self.query = nn.Linear(config.hidden_size, config.hidden_size)
            self.key = nn.Linear(config.hidden_size, config.hidden_size)
            self.value = nn.Linear(config.hidden_size, config.hidden_size)
            self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

        def _split_heads(self, x):
            """(batch, tokens, hidden) -> (batch, heads, tokens, head size)."""
            batch, tokens, _ = x.shape
            return x.reshape(batch, tokens, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

        def forward(self, hidden, additive_mask):
            batch, tokens, width = hidden.shape
            query = self._split_heads(self.query(hidden))
            key = self._split_heads(self.key(hidden))
            value = self._split_heads(self.value(hidden))
            scores = (query @ key.transpose(-1, -2)) / math.sqrt(self.attention_head_size) + additive_mask
            probabilities = self.dropout(scores.softmax(-1))
            context = probabilities @ value                              # (batch, heads, tokens, head size)
            return context.transpose(1, 2).reshape(batch, tokens, width)

    class BertSelfOutput(nn.Module):
        """dense, dropout, then LayerNorm of the sum with the sublayer's input."""

        def __init__(self, config: BertConfig, in_features: int):
            super().__init__()
            self.dense = nn.Linear(in_features, config.hidden_size)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

        def forward(self, hidden, residual):
            return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)

    class BertAttention(nn.Module):
        def __init__(self, config: BertConfig):
            super().__init__()
            self.self = BertSelfAttention(config)
            self.output = BertSelfOutput(config, config.hidden_size)

        def forward(self, hidden, additive_mask):
            return self.output(self.self(hidden, additive_mask), hidden)

    class BertIntermediate(nn.Module):
        def __init__(self, config: BertConfig):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
            self.intermediate_act_fn = nn.GELU()

        def forward(self, hidden):
            return self.intermediate_act_fn(self.dense(hidden))

    class BertLayer(nn.Module):
        def __init__(self, config: BertConfig):
            super().__init__()
            self.attention = BertAttention(config)
            self.intermediate = BertIntermediate(config)
            self.output = BertSelfOutput(config, config.intermediate_size)   # BertOutput: the same shape of sublayer

        def forward(self, hidden, additive_mask):
            attended = self.attention(hidden, additive_mask)
            return self.output(self.intermediate(attended), attended)

    class BertEncoder(nn.Module):
        def __init__(self, config: BertConfig):
            super().__init__()
            self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

        def forward(self, hidden, additive_mask):
            for layer in self.layer:
                hidden = layer(hidden, additive_mask)
            return hidden

    class BertPooler(nn.Module):
        """tanh(dense(first token's hidden state))."""

        def __init__(self, config: BertConfig):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)

        def forward(self, hidden):
            return self.dense(hidden[:, 0]).tanh()

    class BertModel(nn.Module):
        def __init__(self, config: BertConfig, add_pooling_layer: bool):
            super().__init__()
            self.config = config
            self.embeddings = BertEmbeddings(config)
            self.encoder = BertEncoder(config)
            self.pooler = BertPooler(config) if add_pooling_layer else None

        def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
            """The last hidden state (batch, tokens, hidden); with a pooler, (last hidden state, pooled)."""
            batch, tokens = input_ids.shape
            if attention_mask is None:
                additive_mask = 0.0
            else:  # 0 where a key is a real token, the float32 minimum where it is padding
                additive_mask = (1.0 - attention_mask.reshape(batch, 1, 1, tokens).float()) * FLOAT32_MIN
            hidden = self.encoder(self.embeddings(input_ids, token_type_ids, position_ids), additive_mask)
            if self.pooler is None:
                return hidden
            return hidden, self.pooler(hidden)

    return BertModel


def bert_mini_lm(nn, config: BertConfig | None = None, add_pooling_layer: bool = False):
    """A BertModel in the namespace `nn` (lazygrad.nn or torch.nn), MiniLM-L6-sized unless `config`
    says otherwise (6 layers, width 384, 12 heads, FFN 1536), in training mode as built."""
    return _classes(nn)(config or BertConfig(), add_pooling_layer)
