#!/usr/bin/env python3
"""Recomputes chapter 04's model from a `--dump DIR` of ch04_kv_cache and checks the dumped
logits, tokens and cache against it.

An independent implementation: plain Python (standard library only, double precision), reading
config.json and the .npy files, running the Llama-style forward pass one token at a time with
its own KV cache. For each dumped type (fp32, and bf16 when *_bf16.npy exist) it checks that

  * the logits that chose each generated token (logits_cache, logits_recompute) match the
    recomputed ones: fp32 within 1e-3 + 1e-3 |ref| per logit; bf16 (whose device model also
    rounds each projection's input) within a relative L2 error of 2e-2 per step;
  * every generated token is the argmax of the recomputed logits (fp32; in bf16 a token whose
    logit is within 2e-2 of the maximum is accepted, as rounding may flip a near tie);
  * k_cache and v_cache hold the recomputed K (after RoPE) and V of every position (same
    tolerances).

Usage: check_dump.py DIR            exit 0 when every check passes, 1 otherwise
       check_dump.py --tampered DIR   the checks must catch a changed token and a changed logit
                                      in a copy of DIR: exit 0 when they do, 1 when not
"""
import json
import math
import operator
import os
import shutil
import struct
import sys
import tempfile


def read_npy(path):
    """(shape, flat list) of a little-endian float32 or int32 .npy file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(path + ": not a .npy file")
    major = data[6]
    hlen = struct.unpack("<H", data[8:10])[0] if major == 1 else struct.unpack("<I", data[8:12])[0]
    start = 10 if major == 1 else 12
    header = eval(data[start:start + hlen].decode("latin1"))  # a Python dict literal, by the format
    descr, shape = header["descr"], tuple(header["shape"])
    count = 1
    for n in shape:
        count *= n
    body = data[start + hlen:]
    fmt = {"<f4": "f", "<i4": "i"}[descr]
    return shape, list(struct.unpack("<%d%s" % (count, fmt), body[:4 * count]))


def rows(flat, n_rows, n_cols, first=0):
    """n_rows rows of n_cols from flat, starting at row `first`."""
    return [flat[(first + r) * n_cols:(first + r + 1) * n_cols] for r in range(n_rows)]


def matvec(m, x):
    return [sum(map(operator.mul, row, x)) for row in m]


def rmsnorm(x, w, eps):
    s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [wi * xi * s for wi, xi in zip(w, x)]


def rope(vec, heads, d, pos, theta):
    out = list(vec)
    for h in range(heads):
        for i in range(0, d, 2):
            angle = pos * theta ** (-i / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = vec[h * d + i], vec[h * d + i + 1]
            out[h * d + i] = a * c - b * s
            out[h * d + i + 1] = a * s + b * c
    return out


class Model:
    def __init__(self, cfg, dir, suffix):
        self.c = cfg
        L, D, V, F = cfg["layers"], cfg["d_model"], cfg["vocab"], cfg["ffn_dim"]
        d, Hq, Hkv = cfg["head_dim"], cfg["heads"], cfg["kv_heads"]
        load = lambda name: read_npy(os.path.join(dir, name + suffix + ".npy"))[1]
        self.embed = rows(load("embed"), V, D)
        self.lm_head = rows(load("lm_head"), V, D)
        self.final_norm = load("final_norm")
        attn_norm, ffn_norm = load("attn_norm"), load("ffn_norm")
        wq, wk, wv, wo = load("wq"), load("wk"), load("wv"), load("wo")
        wg, wu, wd = load("w_gate"), load("w_up"), load("w_down")
        self.layers = []
        for l in range(L):
            self.layers.append(dict(
                attn_norm=attn_norm[l * D:(l + 1) * D], ffn_norm=ffn_norm[l * D:(l + 1) * D],
                wq=rows(wq, Hq * d, D, l * Hq * d), wk=rows(wk, Hkv * d, D, l * Hkv * d),
                wv=rows(wv, Hkv * d, D, l * Hkv * d), wo=rows(wo, D, Hq * d, l * D),
                wg=rows(wg, F, D, l * F), wu=rows(wu, F, D, l * F), wd=rows(wd, D, F, l * D)))

    def new_cache(self):
        return [([], []) for _ in self.layers]  # per layer: the K and V of each position

    def forward(self, token, pos, cache):
        """The logits of `token` at position `pos`, appending its K and V to `cache`."""
        c = self.c
        d, Hq, Hkv, eps, theta = c["head_dim"], c["heads"], c["kv_heads"], c["norm_eps"], c["rope_theta"]
        group = Hq // Hkv
        x = list(self.embed[token])
        for w, (ks, vs) in zip(self.layers, cache):
            h = rmsnorm(x, w["attn_norm"], eps)
            q = rope(matvec(w["wq"], h), Hq, d, pos, theta)
            ks.append(rope(matvec(w["wk"], h), Hkv, d, pos, theta))
            vs.append(matvec(w["wv"], h))
            att = []
            for head in range(Hq):
                kv = head // group
                qh = q[head * d:(head + 1) * d]
                scores = [sum(map(operator.mul, qh, k[kv * d:(kv + 1) * d])) / math.sqrt(d) for k in ks]
                m = max(scores)
                p = [math.exp(s - m) for s in scores]
                total = sum(p)
                for i in range(d):
                    att.append(sum(pj * v[kv * d + i] for pj, v in zip(p, vs)) / total)
            x = [a + b for a, b in zip(x, matvec(w["wo"], att))]
            h = rmsnorm(x, w["ffn_norm"], eps)
            g, u = matvec(w["wg"], h), matvec(w["wu"], h)
            act = [gi / (1 + math.exp(-gi)) * ui for gi, ui in zip(g, u)]
            x = [a + b for a, b in zip(x, matvec(w["wd"], act))]
        return matvec(self.lm_head, rmsnorm(x, self.final_norm, eps))


def close(got, want, lowp):
    """(ok, max abs err) of one vector against its recomputation."""
    err = max(abs(a - b) for a, b in zip(got, want))
    if lowp:
        num = math.sqrt(sum((a - b) ** 2 for a, b in zip(got, want)))
        den = math.sqrt(sum(b * b for b in want)) or 1.0
        return num / den <= 2e-2, err
    return all(abs(a - b) <= 1e-3 + 1e-3 * abs(b) for a, b in zip(got, want)), err


def check(dir, suffix):
    cfg = json.load(open(os.path.join(dir, "config.json")))
    lowp = suffix == "_bf16"
    model = Model(cfg, dir, suffix)
    (B, P), prompt = read_npy(os.path.join(dir, "prompt.npy"))
    (_, G), tokens = read_npy(os.path.join(dir, "tokens" + suffix + ".npy"))
    V, L, Hkv, d = cfg["vocab"], cfg["layers"], cfg["kv_heads"], cfg["head_dim"]
    logit_files = {}
    for mode in ("cache", "recompute"):
        path = os.path.join(dir, "logits_" + mode + suffix + ".npy")
        if os.path.exists(path):
            logit_files[mode] = read_npy(path)[1]
    kc = read_npy(os.path.join(dir, "k_cache" + suffix + ".npy"))
    vc = read_npy(os.path.join(dir, "v_cache" + suffix + ".npy"))
    S = kc[0][3]
    failures, worst = [], 0.0
    for b in range(B):
        cache = model.new_cache()
        for pos in range(P):
            logits = model.forward(prompt[b * P + pos], pos, cache)
        for i in range(G):
            for mode, flat in logit_files.items():
                got = flat[(i * B + b) * V:(i * B + b + 1) * V]
                ok, err = close(got, logits, lowp)
                worst = max(worst, err)
                if not ok:
                    failures.append("%s%s: sequence %d step %d logits off by %.3g" % (mode, suffix, b, i, err))
            token = tokens[b * G + i]
            best = max(logits)
            if token != logits.index(best) and not (lowp and best - logits[token] <= 2e-2 * max(1.0, abs(best))):
                failures.append("tokens%s: sequence %d step %d is %d, the recomputed argmax is %d" %
                                (suffix, b, i, token, logits.index(best)))
                break  # the sequences differ from here on
            if i + 1 < G:
                logits = model.forward(token, P + i, cache)
        # the cache at the end: positions 0 .. S - 1 of every layer and KV head
        for l in range(L):
            for h in range(Hkv):
                for pos in range(min(S, len(cache[l][0]))):
                    at = (((l * B + b) * Hkv + h) * S + pos) * d
                    for name, flat, mine in (("k_cache", kc[1], cache[l][0]), ("v_cache", vc[1], cache[l][1])):
                        ok, err = close(flat[at:at + d], mine[pos][h * d:(h + 1) * d], lowp)
                        if not ok:
                            failures.append("%s%s: layer %d sequence %d head %d position %d off by %.3g" %
                                            (name, suffix, l, b, h, pos, err))
    return failures, worst


def tamper(src, dst):
    """Copies the dump src to dst with the first generated token of sequence 0 replaced and one
    logit of logits_cache changed by 0.5."""
    shutil.copytree(src, dst)
    for name, offset, fmt, change in (("tokens.npy", 0, "<i", lambda t: (t + 1) % 7),
                                      ("logits_cache.npy", 3, "<f", lambda x: x + 0.5)):
        path = os.path.join(dst, name)
        data = bytearray(open(path, "rb").read())
        start = 10 + struct.unpack("<H", data[8:10])[0] + 4 * offset
        value = struct.unpack(fmt, data[start:start + 4])[0]
        data[start:start + 4] = struct.pack(fmt, change(value))
        open(path, "wb").write(bytes(data))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--tampered":
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "dump")
            tamper(sys.argv[2], copy)
            failures, _ = check(copy, "")
        for line in failures[:5]:
            print("caught: " + line)
        caught_token = any(line.startswith("tokens") for line in failures)
        caught_logit = any(line.startswith("cache") and "step 0" in line for line in failures)
        print("tampered dump: " + ("both changes caught" if caught_token and caught_logit else "NOT CAUGHT"))
        return 0 if caught_token and caught_logit else 1
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    dir = sys.argv[1]
    failures, checked = [], 0
    for suffix in ("", "_bf16"):
        if not os.path.exists(os.path.join(dir, "tokens" + suffix + ".npy")):
            continue
        f, worst = check(dir, suffix)
        checked += 1
        print("%s: %s (largest logit difference %.3g)" % (suffix[1:] or "fp32", "ok" if not f else "FAILED", worst))
        failures += f
    if checked == 0:
        print(dir + ": no tokens.npy or tokens_bf16.npy: not a chapter 04 dump")
        return 1
    for line in failures[:20]:
        print("  " + line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
