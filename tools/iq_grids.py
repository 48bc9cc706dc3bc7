#!/usr/bin/env python3
"""Writes src/kernels/iq_grids.rs: the value grids of ggml's IQ types, read from a ggml source.

    python3 tools/iq_grids.py LLAMA_CPP/ggml/src/ggml-common.h > src/kernels/iq_grids.rs

The grids are data (each entry four or eight small unsigned values packed little-endian); this
copies their numbers and nothing else. The sign tables those types use are derived in Rust
(`iq_signs.rs`), not copied.
"""
import re
import sys

GRIDS = [
    ("iq2xxs_grid", "u64", "IQ2_XXS: 256 entries of eight values, each 8, 25 or 43"),
    ("iq2xs_grid", "u64", "IQ2_XS: 512 entries of eight values, each 8, 25 or 43"),
    ("iq2s_grid", "u64", "IQ2_S: 1024 entries of eight values, each 8, 25 or 43"),
    ("iq3xxs_grid", "u32", "IQ3_XXS: 256 entries of four values, each 4, 12, 20, 28, 36, 44, 52 or 62"),
    ("iq3s_grid", "u32", "IQ3_S: 512 entries of four values, each an odd 1..=15"),
    ("iq1s_grid", "u64", "IQ1_S and IQ1_M: 2048 entries of eight values, each -1, 0 or 1 (0xff, 0, 1)"),
]


def table(src, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + name + r", \w+\)(.*?)GGML_TABLE_END\(\)", src, re.S)
    if not m:
        sys.exit(f"no table {name} in the source")
    return [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", m.group(1))]


def main():
    src = open(sys.argv[1]).read()
    out = ["//! The value grids of ggml's IQ types, as data: made by",
           "//! `python3 tools/iq_grids.py LLAMA_CPP/ggml/src/ggml-common.h > src/kernels/iq_grids.rs`",
           "//! from llama.cpp 0c1e57098. Each entry packs a group's values, one per byte, the first in",
           "//! the lowest byte.", ""]
    for name, ty, doc in GRIDS:
        vals = table(src, name)
        width = 8 if ty == "u32" else 4
        digits = 8 if ty == "u32" else 16
        out.append(f"/// {doc}.")
        if ty == "u64":
            # rustfmt would put entries this wide one per line.
            out.append("#[rustfmt::skip]")
        out.append(f"pub static {name.upper()}: [{ty}; {len(vals)}] = [")
        for i in range(0, len(vals), width):
            out.append("    " + " ".join(f"0x{v:0{digits}x}," for v in vals[i:i + width]))
        out.append("];")
        out.append("")
    sys.stdout.write("\n".join(out))


main()
