#!/usr/bin/env python3
"""Writes a llama2.c checkpoint with llama-2-7b's header (26 GB of fp32 weights) as a sparse file:
its size is what the header implies, yet it takes no disk space (the weights are holes, zeros).
A reader must refuse it against the host-memory budget from the header, before reading it.

  sparse_checkpoint.py OUT
"""
import struct
import sys

dim, hidden, layers, heads, kv_heads, vocab, seq = 4096, 11008, 32, 32, 32, 32000, 2048
head_dim, kv_dim = dim // heads, dim // heads * kv_heads
per_layer = dim + dim * dim + 2 * dim * kv_dim + dim * dim + dim + 3 * hidden * dim
floats = vocab * dim + layers * per_layer + dim + seq * head_dim
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq))
    f.truncate(28 + 4 * floats)
