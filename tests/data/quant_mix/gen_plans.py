#!/usr/bin/env python3
"""Writes tests/data/quant_mix fixtures: the type llama-quantize chose for every tensor.

Run from a directory holding the input models and their imatrix files (see README.md there):
    python3 gen_plans.py LLAMA_QUANTIZE OUTDIR [PRESET…]
(naming presets remakes only their plain plans, without the overrides and refusals). Each plan comes from `llama-quantize --dry-run` (the same choice as a real run, without the
quantization); a plan llama-quantize refuses for want of an importance matrix is recorded in
OUTDIR/refusals.txt with the tensor and type its error names."""
import re, shlex, subprocess, sys

LQ, OUT, ONLY = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, LQ.rsplit('/build/', 1)[0] + '/gguf-py')
import gguf

MODELS = {
    'smollm2': ('smollm2.gguf', None),
    'synth-untied': ('synthA.gguf', 'locus gen-model synthA.gguf --type Q8_0 --dim 256 --ffn 768 --layers 16 --heads 8 --kv-heads 2 --vocab 512 --untied'),
    'synth-tied': ('synthB.gguf', 'locus gen-model synthB.gguf --type Q8_0 --dim 512 --ffn 1024 --layers 8 --heads 4 --kv-heads 4 --vocab 512'),
    'moe8': ('moe8.gguf', 'locus gen-model moe8.gguf --arch qwen3moe --type Q8_0 --dim 256 --ffn 256 --layers 8 --heads 8 --kv-heads 2 --vocab 512 --experts 8'),
    'moe4': ('moe4.gguf', 'locus gen-model moe4.gguf --arch qwen3moe --type Q8_0 --dim 256 --ffn 256 --layers 8 --heads 4 --kv-heads 4 --vocab 512 --experts 4 --untied'),
}
NEW = ['IQ2_XXS', 'IQ2_XS', 'IQ2_S', 'IQ2_M', 'IQ1_S', 'IQ1_M', 'Q2_K_S', 'IQ3_XXS', 'IQ3_S', 'IQ3_M', 'IQ3_XS']
OLD = ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q2_K', 'Q3_K_S', 'Q3_K_M', 'Q3_K_L', 'IQ4_NL', 'IQ4_XS',
       'Q4_K_S', 'Q4_K_M', 'Q5_K_S', 'Q5_K_M', 'Q6_K', 'Q8_0']
IMATRIX_RULES = ['Q4_0', 'Q5_0', 'IQ4_NL', 'IQ4_XS']
# Presets planned on every model, without an importance matrix.
PLAIN = ['MXFP4_MOE']
LINE = re.compile(r'^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[([\d,\s]+)\], type =\s+(\S+), size =.*?(?:\((\S+)\))?$')

def shape(path):
    r = gguf.GGUFReader(path)
    def val(k):
        f = r.fields.get(k)
        return None if f is None else int(f.parts[f.data[0]][0])
    arch = bytes(r.fields['general.architecture'].parts[-1]).decode()
    nh = val(f'{arch}.attention.head_count')
    kv = val(f'{arch}.attention.head_count_kv') or nh
    return (f'arch={arch} n_layer={val(f"{arch}.block_count")} n_head={nh} n_head_kv={kv} '
            f'n_expert={val(f"{arch}.expert_count") or 0}')

def run(model, preset, flags, tag, refusals):
    src, gen = MODELS[model]
    args = [LQ, '--allow-requantize', '--dry-run'] + flags + [src, 'mix.gguf', preset, '2']
    out = subprocess.run(args, capture_output=True, text=True)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-2000:]
    shown = ' '.join(shlex.quote(a) for a in ['llama-quantize', '--allow-requantize'] + flags + [src, 'mix.gguf', preset, '2'])
    if 'will require an imatrix' in log:
        real = subprocess.run([a for a in args if a != '--dry-run'], capture_output=True, text=True)
        assert real.returncode != 0
        m = re.search(r'offending tensor: (\S+)\s+- target type: (\S+)', real.stdout + real.stderr)
        refusals.append(f'{model} {preset} {m.group(1)} {m.group(2).upper()}   # {shown}')
        return
    rows = []
    for l in log.splitlines():
        m = LINE.match(l.strip())
        if m:
            name, dims, src_t, dst_t = m.groups()
            d = [int(x) for x in dims.split(',')]
            while len(d) > 1 and d[-1] == 1:
                d.pop()
            rows.append(f'{name} {"x".join(map(str, d))} {src_t.upper()} {(dst_t or src_t).upper()}')
    ft = {'IQ2_XXS': 19, 'IQ2_XS': 20, 'Q2_K_S': 21, 'IQ3_XS': 22, 'IQ3_XXS': 23, 'IQ1_S': 24, 'IQ4_NL': 25,
          'IQ3_S': 26, 'IQ3_M': 27, 'IQ2_S': 28, 'IQ2_M': 29, 'IQ4_XS': 30, 'IQ1_M': 31, 'Q4_0': 2, 'Q4_1': 3,
          'Q5_0': 8, 'Q5_1': 9, 'Q2_K': 10, 'Q3_K_S': 11, 'Q3_K_M': 12, 'Q3_K_L': 13, 'Q4_K_S': 14, 'Q4_K_M': 15,
          'Q5_K_S': 16, 'Q5_K_M': 17, 'Q6_K': 18, 'Q8_0': 7, 'MXFP4_MOE': 38}[preset]
    head = ["# Produced by llama.cpp's llama-quantize (vendored in llama_cpp_python 0.3.36) with:",
            f'#   {shown}']
    if gen:
        head.append(f'# where {src} was written by: {gen}')
    if any(f == '--imatrix' for f in flags):
        head.append(f'# and its imatrix by: llama-imatrix -m {src} -f text.txt -c 128 --chunks 2 --no-ppl -o {src[:-5]}.imatrix.gguf (tests/data/quant_mix/README.md)')
    head += ['# (--dry-run: the types a real run writes, without quantizing). Columns: tensor name',
             '# (output order), dims (ne0xne1…), type in the source file, type llama-quantize chose.',
             f'# shape {shape(src)}', f'# general.file_type {ft}']
    with open(f'{OUT}/{model}-{preset}{tag}.txt', 'w') as f:
        f.write('\n'.join(head + rows) + '\n')

refusals = []
if ONLY:
    for model in MODELS:
        for p in ONLY:
            run(model, p, [], '', refusals)
    sys.exit(0)
for model in MODELS:
    for p in PLAIN:
        run(model, p, [], '', refusals)
    imx = ['--imatrix', MODELS[model][0][:-5] + '.imatrix.gguf']
    for p in NEW:
        run(model, p, imx, '-imatrix', refusals)
        run(model, p, [], '', refusals)
    for p in IMATRIX_RULES:
        run(model, p, imx, '-imatrix', refusals)
    if model == 'moe8':
        for p in OLD:
            run(model, p, [], '', refusals)
# Overrides.
smol_imx = ['--imatrix', 'smollm2.imatrix.gguf']
run('smollm2', 'IQ3_M', ['--tensor-type', 'attn_v=q8_0', '--tensor-type', r'blk\.(1|2)\.ffn_down=iq4_xs',
                         '--output-tensor-type', 'q4_0', '--token-embedding-type', 'q5_0'], '-overrides', refusals)
run('smollm2', 'Q4_K_M', ['--tensor-type', 'FFN_.*=q5_k', '--tensor-type', 'ffn_up=q8_0'], '-overrides', refusals)
run('smollm2', 'IQ2_XS', smol_imx + ['--tensor-type', r'blk\.[12]?[0-9]\.attn_[kq]=iq3_xxs', '--output-tensor-type', 'q8_0'], '-imatrix-overrides', refusals)
run('synth-untied', 'Q4_K_M', ['--token-embedding-type', 'q8_0', '--output-tensor-type', 'q6_k',
                               '--tensor-type', r'blk\.[0-3]\.attn_v=q8_0'], '-overrides', refusals)
run('synth-untied', 'Q3_K_M', ['--leave-output-tensor', '--tensor-type', r'^blk\.1[0-5]\.ffn_down\.weight$=q2_k'], '-overrides', refusals)
run('synth-tied', 'IQ2_M', ['--imatrix', 'synthB.imatrix.gguf', '--output-tensor-type', 'q8_0'], '-imatrix-overrides', refusals)
run('synth-tied', 'Q5_K_M', ['--pure', '--tensor-type', 'attn=q8_0', '--tensor-type', 'token_embd=q4_k'], '-pure-overrides', refusals)
run('moe8', 'IQ2_XS', ['--imatrix', 'moe8.imatrix.gguf', '--tensor-type', 'ffn_down_exps=q4_k',
                       '--tensor-type', 'attn_output=iq3_s'], '-imatrix-overrides', refusals)
run('moe4', 'IQ3_M', ['--tensor-type', 'ffn_(up|gate)_exps=q4_k', '--token-embedding-type', 'iq4_nl'], '-overrides', refusals)
with open(f'{OUT}/refusals.txt', 'w') as f:
    f.write('# Plans llama-quantize refuses without an importance matrix: model preset, then the tensor\n'
            '# and type its error names ("this quantization requires an importance matrix!"), then\n'
            '# the command (made by gen_plans.py; models as in the fixtures of the same model).\n')
    f.write('\n'.join(refusals) + '\n')
