#!/usr/bin/env python3
"""Generate greedy-continuation golden data with an installed llama_cpp
(llama-cpp-python 0.3.36, vendoring llama.cpp 0c1e57098).

Usage:
  python3 gen_greedy.py MODEL.gguf QUANT_LABEL OUT.txt [--logits N,N,...] [--logits-dir DIR]
                        [--logits-step S] [--swa-ring]

For every prompts/NN.txt (exact bytes) next to this script:
  * tokenize like llama.cpp's completion tool: add_special=True (BOS only if
    the model's tokenizer.ggml.add_bos_token says so), parse_special=True;
  * evaluate the prompt (one llama_decode, logits only for the last token);
  * 64 greedy steps: argmax over the full logits row (ties -> lowest id,
    numpy argmax), feeding each chosen token back one at a time.
    EOS is NOT treated specially; all 64 steps are always taken.
  * records the chosen ids and, per step, logit(top1) - logit(top2).
With --logits, the full float32 logits row after prompt evaluation (the one
used to pick the first generated token) is written, one value per line
('%.9g', round-trips float32), gzipped, to DIR/logits_<QUANT>_pNN.txt.gz.
With --logits-step S, those prompts' rows before greedy step S (after S
decoded tokens) are written too, to DIR/logits_<QUANT>_pNN_sSS.txt.gz.
With --swa-ring, sliding-window layers keep llama.cpp's ring of window +
n_ubatch cells (swa_full=False, as its command-line tools do); without it,
the library's default, a cache as long as the context (swa_full=True).
"""
import base64
import gzip
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
N_STEPS = 64


def main():
    model, quant, out = sys.argv[1], sys.argv[2], sys.argv[3]
    logits_for = set()
    logits_dir = HERE
    logits_step = None
    swa_full = True
    args = sys.argv[4:]
    while args:
        a = args.pop(0)
        if a == "--logits":
            logits_for = {int(x) for x in args.pop(0).split(",")}
        elif a == "--logits-dir":
            logits_dir = args.pop(0)
        elif a == "--logits-step":
            logits_step = int(args.pop(0))
        elif a == "--swa-ring":
            swa_full = False
        else:
            raise SystemExit("unknown arg " + a)

    llm = Llama(model_path=model, n_ctx=2048, n_threads=2, verbose=True, swa_full=swa_full)
    n_vocab = llm.n_vocab()
    sys.stderr.write(
        "PARAMS n_ctx=%d n_batch=%d n_ubatch=%d n_threads=%d n_threads_batch=%d "
        "flash_attn_type=%d type_k=%d type_v=%d offload_kqv=%d n_vocab=%d\n"
        % (
            llm.context_params.n_ctx,
            llm.context_params.n_batch,
            llm.context_params.n_ubatch,
            llm.context_params.n_threads,
            llm.context_params.n_threads_batch,
            llm.context_params.flash_attn_type,
            llm.context_params.type_k,
            llm.context_params.type_v,
            llm.context_params.offload_kqv,
            n_vocab,
        )
    )

    pdir = os.path.join(HERE, "prompts")
    names = sorted(f for f in os.listdir(pdir) if f.endswith(".txt"))
    blocks = []
    for name in names:
        idx = int(name.split(".")[0])
        with open(os.path.join(pdir, name), "rb") as f:
            text = f.read()
        ids = llm.tokenize(text, add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        gen, gaps = [], []
        for step in range(N_STEPS):
            row = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).copy()
            if step in (0, logits_step) and idx in logits_for:
                suffix = "" if step == 0 else "_s%02d" % step
                path = os.path.join(
                    logits_dir, "logits_%s_p%02d%s.txt.gz" % (quant, idx, suffix)
                )
                with gzip.GzipFile(path, "wb", mtime=0) as g:
                    g.write("".join("%.9g\n" % float(v) for v in row).encode())
            tok = int(np.argmax(row))
            top2 = np.partition(row, -2)[-2:]
            gap = float(row[tok]) - float(np.min(top2))
            gen.append(tok)
            gaps.append(gap)
            llm.eval([tok])
        blocks.append(
            "name: %s\nprompt_b64: %s\nprompt_ids: %s\ngen_ids: %s\ngaps: %s\n"
            % (
                name,
                base64.b64encode(text).decode(),
                " ".join(map(str, ids)),
                " ".join(map(str, gen)),
                " ".join("%.6g" % g for g in gaps),
            )
        )
        sys.stderr.write("done %s: %d prompt tokens\n" % (name, len(ids)))
    header = (
        "# greedy golden data; model=%s quant=%s llama.cpp=0c1e57098 (llama-cpp-python %s)\n"
        "# n_ctx=2048 n_threads=2 n_batch=%d n_ubatch=%d flash_attn=%s type_k=%d type_v=%d steps=%d%s\n\n"
        % (
            os.path.basename(model),
            quant,
            llama_cpp.__version__,
            llm.context_params.n_batch,
            llm.context_params.n_ubatch,
            "enabled" if llm.context_params.flash_attn_type == 1 else "disabled",
            llm.context_params.type_k,
            llm.context_params.type_v,
            N_STEPS,
            "" if swa_full else " swa_full=false",
        )
    )
    with open(out, "w") as f:
        f.write(header + "\n".join(blocks))


if __name__ == "__main__":
    main()
