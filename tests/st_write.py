#!/usr/bin/python3
"""Writes a .safetensors file of random tensors byte for byte as the
reference writer would: the Rust `safetensors` crate's serialize, which
safetensors.numpy.save_file and safetensors.torch.save_file call. Debian
packages neither, so this is its layout rebuilt from the crate's source
(safetensors/src/tensor.rs, `prepare`):

- tensors sorted by dtype in descending order of the crate's Dtype enum
  (roughly by alignment: U64 I64 F64 F32 U32 I32 BF16 F16 U16 I16 F8_E4M3
  F8_E5M2 I8 U8 BOOL), then by name (bytes), laid out back to back from 0;
- the header is serde_json's compact output: "__metadata__" first when
  there is metadata, then the tensors in that order, each
  {"dtype":..,"shape":[..],"data_offsets":[begin,end]}; strings escape only
  '"', '\\' and bytes below 0x20 (\\b \\t \\n \\f \\r, else \\u00xx lowercase);
- spaces pad the header to a multiple of 8; its length N comes first as 8
  bytes little-endian; the data follows in the same order.

Metadata keys keep the order given: the crate holds them in a HashMap, so
with more than one key its own order is not reproducible anyway.

--hostile KIND writes a broken file instead, for the tests of readers:
truncated-data, overlap, gap, bad-dtype, huge-header-len, not-json,
count-overflow (the first tensor's element count overflows 64 bits),
bytes-overflow (its count fits, its byte count does not), space-padded
(50 MiB of spaces after the JSON object), space-led (the same before it).

usage: st_write.py OUT --tensors N --bytes TOTAL [--seed S]
                   [--metadata K=V ...] [--hostile KIND] [--dtypes D,D...]
"""
import argparse
import math
import random
import struct
import sys

# name: (bytes per element, position in the crate's Dtype enum)
DTYPES = {
    "BOOL": (1, 0), "U8": (1, 1), "I8": (1, 2), "F8_E5M2": (1, 3),
    "F8_E4M3": (1, 4), "I16": (2, 5), "U16": (2, 6), "F16": (2, 7),
    "BF16": (2, 8), "I32": (4, 9), "U32": (4, 10), "F32": (4, 11),
    "F64": (8, 12), "I64": (8, 13), "U64": (8, 14),
}
# Weighted toward what checkpoints hold.
MIX = ["F32"] * 4 + ["BF16"] * 3 + ["F16"] * 2 + ["I64", "U8", "BOOL", "F64",
       "I32", "I8", "U16", "I16", "U32", "U64", "F8_E4M3", "F8_E5M2"]
HOSTILE = ["truncated-data", "overlap", "gap", "bad-dtype", "huge-header-len",
           "not-json", "count-overflow", "bytes-overflow", "space-padded",
           "space-led"]
# What a padding attack adds: 50 MiB of spaces, which the reference reader
# skips (serde_json takes any whitespace around the object).
FILLER = 50 << 20
CHUNK = 1 << 20
BOOL_BYTES = bytes(b & 1 for b in range(256))


def json_str(s):
    """A JSON string as serde_json writes it."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
             "\f": "\\f", "\r": "\\r"}
    out = []
    for ch in s:
        if ch in short:
            out.append(short[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class Tensor:
    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.nbytes = math.prod(shape) * DTYPES[dtype][0]
        self.begin = self.end = 0


def make_shape(rng, nelem):
    """A shape of nelem elements: a scalar, a vector, a matrix or 3-D."""
    if nelem == 0:
        return rng.choice([[0], [0, 4], [3, 0]])
    if nelem == 1 and rng.random() < 0.5:
        return []
    kind = rng.randrange(3)
    if kind == 0:
        return [nelem]
    rows = max(d for d in range(1, math.isqrt(nelem) + 1) if nelem % d == 0)
    if kind == 1 or rows == 1:
        return [rows, nelem // rows]
    return [1, rows, nelem // rows]


def make_tensors(rng, n, total):
    tensors = []
    for i in range(n):
        dtype = rng.choice(MIX)
        share = total // n + (total % n if i == n - 1 else 0)
        tensors.append(Tensor("model.layers.%d.weight" % i, dtype,
                              make_shape(rng, share // DTYPES[dtype][0])))
    return tensors


def layout(tensors):
    """The crate's order and offsets: dtype descending, then name."""
    order = sorted(tensors, key=lambda t: (-DTYPES[t.dtype][1],
                                           t.name.encode()))
    off = 0
    for t in order:
        t.begin, t.end = off, off + t.nbytes
        off = t.end
    return order


def header(order, metadata):
    parts = []
    if metadata is not None:
        parts.append('"__metadata__":{' + ",".join(
            json_str(k) + ":" + json_str(v) for k, v in metadata) + "}")
    for t in order:
        parts.append('%s:{"dtype":%s,"shape":[%s],"data_offsets":[%d,%d]}' % (
            json_str(t.name), json_str(t.dtype),
            ",".join(str(d) for d in t.shape), t.begin, t.end))
    text = ("{" + ",".join(parts) + "}").encode()
    return text + b" " * ((8 - len(text) % 8) % 8)


def write_data(f, rng, t, nbytes):
    left = nbytes
    while left:
        k = min(left, CHUNK)
        b = rng.randbytes(k)
        f.write(b.translate(BOOL_BYTES) if t.dtype == "BOOL" else b)
        left -= k


def nonempty_pair(order):
    """An index i whose tensor and the one before both hold bytes."""
    for i in range(1, len(order)):
        if order[i - 1].nbytes and order[i].nbytes:
            return i
    sys.exit("st_write.py: this kind needs two tensors with data: "
             "raise --bytes or --tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tensors", type=int, required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--metadata", action="append", default=None,
                    metavar="K=V")
    ap.add_argument("--hostile", choices=HOSTILE)
    ap.add_argument("--dtypes", help="draw only from these dtypes (comma-separated)")
    a = ap.parse_args()
    if a.dtypes:
        global MIX
        MIX = [d for d in MIX if d in a.dtypes.split(",")]
        if not MIX:
            sys.exit("st_write.py: --dtypes names none of " + ", ".join(DTYPES))
    if a.tensors < 0 or a.bytes < 0 or (a.tensors == 0 and a.bytes):
        sys.exit("st_write.py: need --tensors >= 0, --bytes >= 0 "
                 "(and no bytes without tensors)")
    metadata = None
    if a.metadata is not None:
        metadata = [kv.split("=", 1) if "=" in kv else [kv, ""]
                    for kv in a.metadata]

    rng = random.Random(a.seed)
    order = layout(make_tensors(rng, a.tensors, a.bytes))
    data_len = order[-1].end if order else 0
    extra = 0  # bytes added (gap) or removed (overlap, truncation)
    if a.hostile in ("overlap", "gap"):
        i = nonempty_pair(order)
        shift = -min(order[i - 1].nbytes, 4) if a.hostile == "overlap" else 8
        for t in order[i:]:
            t.begin += shift
            t.end += shift
        extra = shift
    elif a.hostile == "truncated-data":
        if not data_len:
            sys.exit("st_write.py: truncated-data needs --bytes > 0")
        extra = -max(1, order[-1].nbytes // 2) if order[-1].nbytes else -1
    elif a.hostile == "bad-dtype":
        if not order:
            sys.exit("st_write.py: bad-dtype needs a tensor")
        order[0].dtype = "F33"
    elif a.hostile in ("count-overflow", "bytes-overflow"):
        if not order:
            sys.exit("st_write.py: %s needs a tensor" % a.hostile)
        # 2^96 elements; or 2^62 elements of 4 bytes: 2^64 bytes
        order[0].shape = ([1 << 32] * 3 if a.hostile == "count-overflow"
                          else [1 << 32, 1 << 30])
        order[0].dtype = "U8" if a.hostile == "count-overflow" else "F32"

    text = header(order, metadata)
    if a.hostile == "not-json":
        text = b"this is not JSON"
    elif a.hostile == "space-padded":
        text = text.rstrip(b" ") + b" " * FILLER
    elif a.hostile == "space-led":
        text = b" " * FILLER + text.rstrip(b" ")
    prefix = len(text)
    if a.hostile == "huge-header-len":
        prefix = 1 << 40

    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", prefix))
        f.write(text)
        want = data_len + extra
        wrote = 0
        for t in order:
            k = min(t.nbytes, want - wrote)
            if k <= 0:
                break
            write_data(f, rng, t, k)
            wrote += k
        if wrote < want:  # a gap: filler
            f.write(rng.randbytes(want - wrote))
    print("%s: %d tensors, %d-byte header, %d data bytes%s" % (
        a.out, len(order), len(text), data_len + extra,
        " (hostile: %s)" % a.hostile if a.hostile else ""))


if __name__ == "__main__":
    main()
