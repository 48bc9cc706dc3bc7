#!/usr/bin/env python3
"""Write (tensor name, ggml type, sha256 of raw tensor data, ne dims) for a GGUF file.

Usage: python3 requant_hashes.py MODEL.gguf OUT.tsv
Needs the `gguf` PyPI package (tested with gguf 0.19.0). Tensor order is the
order of the GGUF tensor-info table. Raw bytes are file[data_offset : data_offset + n_bytes]
where data_offset already includes the file's tensor-data section start.
"""
import hashlib
import sys

from gguf import GGUFReader


def main():
    path, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(path)
    with open(path, "rb") as f:
        blob = f.read()
    lines = ["# name\tggml_type\tsha256\tne (innermost first)"]
    for t in r.tensors:
        raw = blob[t.data_offset : t.data_offset + t.n_bytes]
        assert len(raw) == t.n_bytes
        dims = "x".join(str(int(d)) for d in t.shape)
        lines.append(
            "%s\t%s\t%s\t%s" % (t.name, t.tensor_type.name, hashlib.sha256(raw).hexdigest(), dims)
        )
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
