#!/usr/bin/env python3
"""Write (tensor name, ggml type, sha256 of raw tensor data, ne dims) for a GGUF file.

Usage: python3 requant_hashes.py MODEL.gguf OUT.tsv [--cmd TEXT]...
Needs the `gguf` PyPI package (tested with gguf 0.19.0; llama.cpp's own `gguf-py` folder on
PYTHONPATH works too). Tensor order is the order of the GGUF tensor-info table. Raw bytes are
file[data_offset : data_offset + n_bytes] where data_offset already includes the file's
tensor-data section start.

Header lines (all start with `#`): each --cmd TEXT (the commands that made MODEL), then
`# file_sha256 <hex>` (the whole file) and `# general.file_type <n>`, then the column names.
"""
import hashlib
import sys

from gguf import GGUFReader


def main():
    args = sys.argv[1:]
    cmds = []
    while "--cmd" in args:
        i = args.index("--cmd")
        cmds.append(args[i + 1])
        del args[i : i + 2]
    path, out = args
    r = GGUFReader(path)
    with open(path, "rb") as f:
        blob = f.read()
    ftype = r.fields["general.file_type"]
    lines = ["# " + c for c in cmds]
    lines.append("# file_sha256 %s" % hashlib.sha256(blob).hexdigest())
    lines.append("# general.file_type %d" % int(ftype.parts[ftype.data[0]][0]))
    lines.append("# name\tggml_type\tsha256\tne (innermost first)")
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
