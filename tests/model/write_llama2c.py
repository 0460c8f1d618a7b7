#!/usr/bin/env python3
"""Writes a small llama2.c checkpoint and tokenizer, independently of the project's C++ writer,
for the end-to-end test of `ch04_kv_cache --checkpoint --tokenizer --prompt`.

Usage: write_llama2c.py DIR   writes DIR/mini.bin and DIR/tokenizer.bin

The checkpoint (format of llama2.c's run.c, version-0 header): seven int32 (dim 64, hidden_dim
96, n_layers 2, n_heads 4, n_kv_heads 2, vocab_size 360 (positive: the classifier is the
embedding), seq_len 64), then float32 token_embedding [V, D], rms_att [L, D], wq [L, D, D],
wk and wv [L, D/2, D], wo [L, D, D], rms_ffn [L, D], w1 [L, F, D], w2 [L, D, F], w3 [L, F, D],
rms_final [D], and two unused tables of seq_len * head_size / 2 floats. Weights are seeded
uniform values scaled by 1 / sqrt(fan_in).

The tokenizer: int32 max_token_length, then per token float32 score, int32 length, bytes:
<unk>, <s>, </s>, the 256 byte tokens <0x00> ... <0xFF>, the 95 printable ASCII characters,
and a few merges ("nc", "nce", " u", " up", "on", " upon", " t", " a", "im", ...).
"""
import os
import random
import struct
import sys

D, F, L, H, HKV, SEQ = 64, 96, 2, 4, 2, 64
MERGES = ["nc", "nce", " u", "up", " up", "on", " upon", " t", "ti", "im", "me", " a", "On", "Once"]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    pieces = ["<unk>", "\n<s>\n", "\n</s>\n"] + ["<0x%02X>" % b for b in range(256)]
    pieces += [chr(c) for c in range(32, 127)]
    pieces += MERGES
    scores = [0.0] * 259 + [-1000.0 + c for c in range(95)] + [-10.0 + i for i in range(len(MERGES))]
    V = len(pieces)
    with open(os.path.join(out, "tokenizer.bin"), "wb") as f:
        f.write(struct.pack("<i", max(len(p.encode()) for p in pieces)))
        for p, s in zip(pieces, scores):
            b = p.encode()
            f.write(struct.pack("<fi", s, len(b)) + b)

    rng = random.Random(1234)
    hs = D // H

    def tensor(n, fan_in, center=0.0):
        a = (3.0 / fan_in) ** 0.5
        return [center + rng.uniform(-a, a) for _ in range(n)]

    def norm(n):
        return [rng.uniform(0.9, 1.1) for _ in range(n)]

    data = []
    data += tensor(V * D, 1.0 / 3.0)          # embedding, variance ~1
    data += norm(L * D)                       # rms_att
    data += tensor(L * D * H * hs, D)         # wq
    data += tensor(L * D * HKV * hs, D)       # wk
    data += tensor(L * D * HKV * hs, D)       # wv
    data += tensor(L * H * hs * D, H * hs)    # wo
    data += norm(L * D)                       # rms_ffn
    data += tensor(L * F * D, D)              # w1 (gate)
    data += tensor(L * D * F, F)              # w2 (down)
    data += tensor(L * F * D, D)              # w3 (up)
    data += norm(D)                           # rms_final
    data += [0.0] * (SEQ * hs)                # the two unused tables
    with open(os.path.join(out, "mini.bin"), "wb") as f:
        f.write(struct.pack("<7i", D, F, L, H, HKV, V, SEQ))
        f.write(struct.pack("<%df" % len(data), *data))
    print("wrote %s/mini.bin (vocab %d) and %s/tokenizer.bin" % (out, V, out))


if __name__ == "__main__":
    main()
