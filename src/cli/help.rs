//! Every command's `--help` text (tests/cli_errors.rs checks that each flag listed here is one
//! the parser takes, and that llama.cpp's flags are listed).

pub const MAIN: &str = "\
locus — CPU inference for GGUF language models, with NUMA-aware weight placement

Usage: locus <COMMAND> [OPTIONS]

Commands:
  run         generate text from a prompt (llama.cpp's flags)
  serve       an OpenAI-compatible HTTP server with continuous batching (llama-server's flags)
  perplexity  score a text file as llama-perplexity does
  imatrix     compute an importance matrix as llama-imatrix does (for quantize --imatrix)
  tokenize    print a text's token ids as llama-tokenize does
  quantize    rewrite a model's weights as llama-quantize does (Q4_K_M, Q8_0, F16, ...)
  gen-model   write a GGUF of any supported family with random weights (benchmarks, tests)
  bench       prompt and decode speed, llama-bench style (pp/tg, mean ± sd)
  membw       measure memory read bandwidth per node (--matrix: node to node)
  topo        show NUMA nodes, CPUs, memory, distances and which NUMA system calls are allowed
  audit       place a model as `run` would and report where every page landed, and locality

Run `locus <COMMAND> --help` for a command's options; `locus --version` prints the version.
Environment: LOCUS_KERNELS=scalar|avx2|avx512 forces a kernel tier.
             LOCUS_PREFETCH=l1|l2 forces where decode prefetches weights (default: L2
             when they outgrow the last-level cache, else L1).
";

/// The placement options' help lines, shared by `run` and `audit`.
macro_rules! numa_options_help {
    () => {
        "      --numa MODE         weight placement: off, distribute, interleave, isolate, mirror,
                          shard or auto (default: auto = mirror if every node has room,
                          else shard; on a one-node host mirror only where the kernels
                          read a packed copy faster (Q4_0, Q4_K, Q5_K, Q6_K,
                          IQ4_XS on AVX2 and AVX-512; IQ4_NL on AVX-512),
                          else off)
      --numa-node N       the node for --numa isolate (default: the node locus starts on)
      --pin node|core     pin each thread to its node's CPUs (default) or to one CPU
      --strict            fail (exit 2) instead of falling back when placement cannot be honoured
      --hugepages         back the weight copies with 2 MiB hugetlb pages (falls back loudly)
      --poll N            how long idle threads spin, 0-100 (default 50; 0 where threads
                          outnumber CPUs: VMs, CPU quotas)
"
    };
}

pub const RUN: &str = concat!(
    "\
Usage: locus run -m FILE (-p TEXT | -f FILE) [OPTIONS]

Generates a continuation of the prompt. The generated text (not the prompt) goes to stdout as it
is produced; load information, warnings and the timing line go to stderr.

Options:
  -m, --model FILE        GGUF model file (llama, qwen2, qwen3 or gemma3)
  -p, --prompt TEXT       prompt text (UTF-8); special tokens written in it (e.g. <|im_start|>)
                          are recognised
  -f, --file FILE         read the prompt from FILE (UTF-8; one trailing newline dropped, as
                          llama.cpp does); -p and -f exclude each other
  -n, --n-predict N       tokens to generate (default: -1 = until end of generation or context
                          full; -2 the same)
  -t, --threads N         worker threads, 1-1024 (default: the CPUs this process may use)
  -c, --ctx-size N        context size in tokens (default: 4096, or the model's training
                          context if smaller; 0 = the training context; more is allowed,
                          with a warning)
      --temp X            temperature; 0 or less = greedy (default: 0.8)
      --top-k N           keep the N most likely tokens; 0 or less = off (default: 40)
      --top-p X           nucleus sampling threshold; 1 = off (default: 0.95)
      --min-p X           drop tokens below X × the top probability; 0 = off (default: 0.05)
      --repeat-penalty X  penalise recent tokens; 1 = off (default: 1.0)
      --repeat-last-n N   window of recent tokens for the penalty; 0 = off, -1 = the context
                          (default: 64)
  -s, --seed N            random seed (default: -1 = random, printed on stderr when sampling)
  -ctk, --cache-type-k T  KV cache type: f16 (default, as llama.cpp), f32 or q8_0 (keys and
                          values in Q8_0 blocks, as llama.cpp's -fa on stores them)
  -ctv, --cache-type-v T  (must equal -ctk)
      --ignore-eos        keep generating past end-of-generation tokens
      --chat              wrap the prompt as a user message in the model's chat template
      --chat-template NAME  use this template instead (implies --chat): chatml, qwen, llama2,
                          llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3,
                          mistral-v3-tekken, mistral-v7, mistral-v7-tekken, llama3, gemma,
                          deepseek2, deepseek3, chatglm4, kimi-k2, gpt-oss (harmony: the
                          final channel on stdout, the analysis on stderr) or gemma4
  -sys, --system TEXT     system message for --chat (default: the model template's, if any)
",
    numa_options_help!(),
    "  -v, --verbose           print model, kernel tier, placement and its audit to stderr
                          (a slow placement's progress each second: always on a terminal)
  -h, --help              this help
"
);

pub const SERVE: &str = concat!(
    "\
Usage: locus serve -m FILE [--host ADDR] [--port N] [-np SLOTS] [-c CTX] [OPTIONS]

Serves the model over HTTP/1.1 with OpenAI's API: POST /v1/chat/completions and
/v1/completions (streamed as server-sent events with \"stream\": true), GET /v1/models,
GET /health (503 while loading or shutting down, 200 when ready), GET /metrics (Prometheus
text, locus_ and llama-server's llamacpp: names), POST /tokenize and /detokenize; and
llama-server's own: POST /completion, GET /props, GET /slots, POST /apply-template,
GET /v1/models/{id}, OPTIONS (CORS). Each step decodes a token for every busy slot and feeds
waiting prompts in chunks; a request at temperature 0 (or with a seed) gets the same tokens
alone or beside others, and the same as `locus run`. SIGTERM or SIGINT: stop accepting,
finish the running streams (10 s at most), exit 0.

Options:
  -m, --model FILE        GGUF model file
      --host ADDR         address to listen on (default: 127.0.0.1; 0.0.0.0 for every interface)
      --port N            TCP port (default: 8080; 0 = any free port, printed on stderr)
  -np, --parallel N       sequence slots served at once, 1-256 (default: 1)
  -c, --ctx-size N        tokens of all slots together, as llama-server's: each slot gets
                          N / SLOTS (default: 4096, or the training context if smaller;
                          0 = the training context; at least 8 a slot)
  -n, --n-predict N       tokens a request generates when it does not say (default: -1 =
                          until the end of generation or of the slot's context)
      --temp T            temperature of requests that do not say (default: 0.8)
  -s, --seed N            seed of requests that do not say (default: -1 = random each)
  -t, --threads N         worker threads, 1-1024 (default: the CPUs this process may use)
      --api-key KEY       require `Authorization: Bearer KEY` on every endpoint but /health
      --timeout S         seconds a request may take to arrive, an idle connection may stay
                          open, and a client may leave a response unread (default: 60)
      --queue N           requests that may wait for a busy slot; beyond: 503 with Retry-After
                          (default: 64)
      --max-connections N open connections at most; beyond: 503 and close (default: 256)
      --max-body BYTES    largest request body (default: 8388608)
  -a, --alias NAMES       the model's names in /v1/models, comma-separated (the file name is
                          listed too); a request may name any model: this one serves it
      --no-slots          GET /slots answers 501 (--slots: served, the default)
      --metrics           accepted for llama-server's scripts: /metrics is always served
      --jinja             refused: locus writes the chat formats it knows (--chat-template)
      --slot-save-path P  refused: slots are not saved or restored yet
      --chat-template NAME  chat format instead of the model's template (names as for run);
                          with gpt-oss (harmony) the analysis channel is answered as
                          reasoning_content, the final channel as content
      --parse-special-in-messages  control tokens written in a chat message's text become
                          those tokens, as llama-server reads them (default: message text is
                          text; only the template writes control tokens)
  -ctk, --cache-type-k T  KV cache type: f16 (default), f32 or q8_0
  -ctv, --cache-type-v T  (must equal -ctk)
",
    numa_options_help!(),
    "  -v, --verbose           print the placement plan to stderr
                          (a slow placement's progress each second: always on a terminal)
  -h, --help              this help
"
);

pub const PERPLEXITY: &str = "\
Usage: locus perplexity -m FILE -f TEXT [OPTIONS]

Cuts the tokenized text into windows of -c tokens, scores the second half of each, and prints
`Final estimate: PPL = <value> +/- <error>` (the same procedure as llama-perplexity).

Options:
  -m, --model FILE     GGUF model file
  -f, --file FILE      text to score
  -c, --ctx-size N     window size in tokens, at least 4 (default: 512; 0 = the model's
                       training context)
      --chunks N       score at most N windows (default: -1 = all)
  -t, --threads N      worker threads, 1-1024 (default: the CPUs this process may use)
  -ctk, -ctv T         KV cache type: f16 (default), f32 or q8_0
      --numa MODE, --numa-node N, --pin node|core, --strict, --hugepages
                       weight placement, as for `locus run`
  -h, --help           this help
";

pub const IMATRIX: &str = "\
Usage: locus imatrix -m FILE -f TEXT [-o OUT] [OPTIONS]

Evaluates the tokenized text in chunks of -c tokens, as llama-imatrix does, summing the squares
of every layer matrix's inputs, and writes the importance matrix llama-imatrix writes (GGUF:
`<tensor>.in_sum2` and `<tensor>.counts` per weight, per expert for `*_exps`), the same values
bit for bit; `locus quantize --imatrix OUT` and llama-quantize read it. Prints the running
perplexity of each chunk's second half and `Final estimate: PPL = <value> +/- <error>`.

Options:
  -m, --model FILE       GGUF model file
  -f, --file FILE        calibration text (at least two chunks of tokens)
  -o, --output FILE      where to write the matrix (default: imatrix.gguf)
      --output-format F  gguf (the only form written; llama-quantize also reads it)
  -c, --ctx-size N       tokens a chunk, at least 2 (default: 512)
      --chunks N         use at most N chunks (default: -1 = all)
      --chunk N          skip the first N chunks of the text (default: 0)
  -b, --batch-size N     logical batch: b / c chunks are evaluated side by side, as
                         llama-imatrix does (default: 2048)
  -ub, --ubatch-size N   micro-batch (default: 512)
      --process-output   collect output.weight too (never a head tied to the embedding)
      --no-ppl           do not print the perplexity
      --parse-special    read special tokens' text as those tokens (default: off)
      --no-parse-special the default
  -fa, --flash-attn off  accepted for llama-imatrix's command lines: locus computes
                         attention as llama.cpp does with flash attention off (compare
                         with llama-imatrix -fa off)
  -t, --threads N        worker threads, 1-1024 (default: the CPUs this process may use)
  -ctk, -ctv T           KV cache type: f16 (default), f32 or q8_0
      --numa MODE, --numa-node N, --pin node|core, --strict, --hugepages
                         weight placement, as for `locus run`
  -h, --help             this help
";

pub const TOKENIZE: &str = "\
Usage: locus tokenize -m FILE (-p TEXT | -f FILE | --stdin) [--ids] [--no-parse-special]
                      [--chat [--chat-template NAME] [--system TEXT]]

Prints the token ids of a text as llama-tokenize does (BOS added if the model asks for it).

Options:
  -m, --model FILE       GGUF model file (only its vocabulary is used)
  -p, --prompt TEXT      text to tokenize (UTF-8)
  -f, --file FILE        read the text from FILE, every byte kept (as llama-tokenize does;
                         UTF-8, at most 256 MiB)
      --stdin            read the text from standard input, every byte kept (the same)
                         (one of -p, -f and --stdin)
      --ids              print only `[id, id, ...]`
      --no-parse-special treat special-token text (e.g. <|im_start|>) as plain text
      --chat             tokenize the chat prompt `run --chat` evaluates, the text as the
                         user message
      --chat-template NAME  the chat template, as for `run` (implies --chat)
  -sys, --system TEXT    the system message, as for `run`
  -h, --help             this help
";

pub const GEN_MODEL: &str = "\
Usage: locus gen-model OUTPUT [OPTIONS]

Writes a GGUF with random weights and a working byte-level BPE vocabulary, so models of any
size and supported family can be benchmarked and tested without downloads. OUTPUT is written
atomically.

Options:
      --arch NAME     family: llama (default), qwen2 (Q/K/V biases), qwen3 (Q/K head norms),
                      gemma3 (head norms, post-norms, GELU, sliding-window layers), qwen3moe
                      (qwen3 with a mixture of experts in every layer), mixtral (llama with
                      one), glm4moe (Q/K/V biases, NEOX RoPE, experts with sigmoid routing, a
                      selection bias and a shared expert), gpt-oss (attention sinks,
                      every other layer in a sliding window, YaRN, biases everywhere,
                      experts with swiglu_oai, the o200k pre-tokenizer `gpt-4o`; --type
                      MXFP4 writes MXFP4 experts and Q8_0 for the other matrices, as
                      gpt-oss ships), gemma4 (gemma3's layer with
                      its own shape for the global layers, whose values are their keys'
                      projection; value norms, a scalar per layer, capped logits; a
                      window must be given)
      --preset NAME   starting shape: tiny (default), 1b (dim 2048, 16 layers, FFN 5632,
                      32 heads, 4 KV heads, vocabulary 32000) or a3b (Qwen3-30B-A3B's layer
                      with a quarter of its 48 layers and a 32000-token vocabulary: qwen3moe,
                      dim 2048, 12 layers, 32 heads of 128, 4 KV heads, 128 experts of 768,
                      8 per token) or glm45-air (GLM-4.5-Air's proportions at dim 2048:
                      glm4moe, 12 layers, the first dense, 48 heads of 128 with RoPE on 64,
                      4 KV heads, 128 experts of 768, 8 per token, 1 shared, 1 NextN layer)
                      or v2-lite (DeepSeek-V2-Lite's layer: deepseek2, dim 2048, 6 layers,
                      the first dense, 16 heads of 128 + 64 rotated, latent 512, 64 experts
                      of 1408, 6 per token, 2 shared) or v3 (DeepSeek-V3's proportions at
                      dim 2048: 6 layers, 2 dense, query rank 512, latent 512, 256 experts of
                      256, 8 per token from 4 of 8 groups, 1 shared, sigmoid with bias, YaRN),
                      gpt-oss-120b (gpt-oss-120b's layer: gpt-oss, dim 2880, 4 of its 36
                      layers, 64 heads of 64, 8 KV heads, 32 of its 128 experts of 2880,
                      4 per token, window 128, YaRN by 32; about 2 GiB with --type MXFP4)
                      gemma4-31b (Gemma 4 31B's layers: dim 5376, FFN 21504, 32 heads;
                      local layers 16 KV heads of 256, window 1024; global layers 4 KV heads
                      of 512 with RoPE on 128; 6 of its 60 layers, five local to one global,
                      vocabulary 32000, tied; logits capped at 30) or gemma4-a4b (Gemma 4
                      26B-A4B's layers: dim 2816, a dense FFN of 2112 beside 128 experts of
                      704, 8 per token, 16 heads; local layers 8 KV heads of 256, global
                      layers 2 KV heads of 512; 6 of its 30 layers as gemma4-31b's; about
                      2.5 GiB at Q4_0) or gemma4-e2b (Gemma 4 E2B's layers: dim 1536, FFN
                      6144, 8 heads, 1 KV head; local heads of 256, window 512; global heads
                      of 512 with RoPE on 128; four local to one global; per-layer
                      embeddings of 256; 10 of its 35 layers, the last 5 shared-KV with a
                      double-wide FFN; vocabulary 32000, tied; about 350 MiB at Q4_0; its
                      RoPE bases are taken as gemma4-31b's, not looked up)
      --type T        weight type, any locus computes: F32, F16, BF16, Q4_0, Q4_1, Q5_0,
                      Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ3_XXS,
                      IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, MXFP4 (default: Q4_0;
                      --dim and --ffn must be whole blocks of it: 256 for the K-quants and
                      the IQ types but IQ4_NL; with no importance matrix, where ggml's
                      quantizer needs one (IQ2_XXS, IQ2_XS, IQ1_S) every weight counts 1)
      --dim N         embedding length
      --layers N      number of blocks
      --ffn N         feed-forward length
      --heads N       attention heads
      --kv-heads N    key/value heads (deepseek2: 1, its default)
      --vocab N       vocabulary size (at least 259)
      --ctx N         training context length written to the metadata
      --head-dim N    values per attention head (default: --dim / --heads)
      --window N      gemma3, gemma4, gpt-oss: sliding window in tokens (default: gemma3
                      none, all layers global; gpt-oss 128; gemma4: required)
      --swa-pattern N gemma3, gemma4: of every N layers the first N-1 are local (default: not
                      written, which llama.cpp reads as 6; gemma4 writes the per-layer list)
      --global-head-dim N, --global-kv-heads N, --global-rope-dims N
                      gemma4: the global layers' head size, KV heads and rotated dimensions
                      (default: the local layers' --head-dim and --kv-heads, the whole head;
                      --head-dim and --kv-heads are the sliding-window layers')
      --softcap X     gemma4: final_logit_softcapping (default: not written, llama.cpp's 30)
      --ple N         gemma4: per-layer embeddings of N values per layer (E2B/E4B; a
                      multiple of the type's block; default 0: none)
      --shared-kv-layers N
                      gemma4: the last N layers reuse the cache of the last earlier layer of
                      their kind (E2B/E4B; the last cached layer must be global, the one
                      before it local; default 0)
      --double-wide-ffn
                      gemma4: the shared-KV layers' FFN twice --ffn (E2B/E4B's
                      use_double_wide_mlp; feed_forward_length written per layer)
      --experts N     experts per layer, for qwen3moe, gpt-oss, gemma4 (beside its dense FFN,
                      as the 26B-A4B) and mixtral (default 8)
      --experts-used N
                      experts per token (default 2)
      --expert-ffn N  one expert's feed-forward length (default: the --ffn value, which
                      mixtral's experts must have)
      --kv-lora N     deepseek2: the latent vector's size (default: --dim / 4)
      --q-lora N      deepseek2: the query's low rank (default: none, a full-rank attn_q)
      --v-head-dim N  deepseek2: a head's output values (default: --head-dim − --rope-dim)
      --unabsorbed    deepseek2: the older unabsorbed form (one attn_kv_b a layer, a KV
                      head per query head), as files converted before attn_k_b/attn_v_b
      --yarn F        deepseek2, gpt-oss: YaRN RoPE scaling by factor F (default: deepseek2
                      none; gpt-oss 32, over an original context of --ctx / F)
      --yarn-log-mul M
                      deepseek2: rope.scaling.yarn_log_multiplier (default 0.1, V3's)
      --shared-experts N   shared experts every token runs (glm4moe; default 1)
      --dense-layers N     leading layers with a dense FFN of --ffn (glm4moe; default 0)
      --expert-groups N    expert groups, of which --expert-groups-used N hold a token's
                           experts (group-limited routing; default: none)
      --gating G           softmax or sigmoid, written as expert_gating_func (default: not
                           written, the family's own)
      --probs-bias, --no-probs-bias   a per-expert selection bias (glm4moe: on)
      --weights-scale X    expert_weights_scale (default: not written)
      --weights-norm, --no-weights-norm   expert_weights_norm (glm4moe: on)
      --rope-dims N        rotated dimensions per head (default: the whole head; deepseek2:
                           a third of --head-dim, even)
      --nextn N            NextN layers written past the trunk (glm4moe), never run
      --seed N        random seed (default: 1)
      --untied        separate output head instead of sharing the token embedding
  -h, --help          this help
";

pub const BENCH: &str = "\
Usage: locus bench -m FILE[,FILE...] [-p N] [-n N] [-r N] [-t N[,N...]] [--numa LIST|all]
                   [--rounds N] [--cold] [--json | --csv] [--svg FILE] [placement options]

For every model × thread count × placement mode (an arm), each in a fresh process and in that
order: pp<N> evaluates N random prompt tokens from an empty cache, tg<N> generates N tokens one
at a time; each after a warm-up run, repeated -r times, reported as mean ± sd tokens/s in
llama-bench's markdown table (or JSON/CSV). Per arm also: load time (and for the modes that copy
the weights, the rate the copies were built at, GB/s), how much of the model file
the page cache held at the start, weight bytes resident per node and locality (as `locus
audit`), and the roofline: decode t/s as a share of (read bandwidth of the arm's nodes, measured
as `locus membw` does right after each round of the arm, ÷ weight bytes read per token). Notes under the table give the host's
numa_balancing and THP state and how far apart the arms are against run-to-run spread. For a
mixture of experts, --json rows also carry expert_counts: per layer, how many tokens chose
each expert over the test's timed runs.

Options:
  -m, --model FILES   comma-separated GGUF files
  -p, --n-prompt N    prompt tokens (default: 512; 0 skips the test)
  -n, --n-gen N       generated tokens (default: 128; 0 skips the test)
  -r, --repetitions N repetitions (default: 5)
  -t, --threads LIST  comma-separated thread counts (default: the CPUs this process may use)
      --numa LIST     comma-separated placement modes, or all (off, distribute, interleave,
                      isolate, mirror, shard); default: auto
      --rounds N      run the whole list of arms N times, round-robin, pooling the samples, so
                      sd includes process-to-process spread and drift (default: 1)
      --cold          drop the model file from the page cache before every arm (posix_fadvise);
                      without it the file is read through before every arm (warm)
      --json          JSON array of rows
      --csv           CSV, one row per line
      --svg FILE      draw the arms' decode speeds with sd whiskers, roofline and locality
      --numa-node N, --pin node|core, --strict, --hugepages, --poll N
                      placement options every arm shares, as for `locus run`
  -h, --help          this help
";

pub const MEMBW: &str = "\
Usage: locus membw [-t N] [--size MIB] [--passes N] [--matrix] [--json]

Measures read bandwidth with threads pinned to each node's CPUs reading memory bound to that
node (the decode roofline: tokens/s <= bandwidth / weight bytes read per token). Each thread
streams its own slice, requesting lines 8 KiB ahead of its loads as the decode kernels do.
--matrix measures every CPU node against every memory node: what locality is worth on this
host.

Options:
  -t, --threads N   threads per measurement, capped at the node's CPUs (default: all allowed)
      --size MIB    buffer per measurement (default: 512, or 4x the last-level cache
                    where larger: a buffer the cache holds in part overstates memory)
      --passes N    passes per measurement; the best counts (default: 5)
      --matrix      node-to-node matrix
      --json        one JSON object
  -h, --help        this help
";

pub const QUANTIZE: &str = "\
Usage: locus quantize [OPTIONS] INPUT OUTPUT TYPE [NTHREADS]

Writes INPUT's weights in TYPE as `llama-quantize --allow-requantize [OPTIONS]` does: the same
type for every tensor, the same tensor order, the same metadata (with general.file_type =
TYPE's number, and with --imatrix the quantize.imatrix.* keys). Byte for byte where locus has
ggml's quantizer for every type written: the reference ones without an importance matrix; with
one, the types that weigh their rows by it must have their weighted quantizer. Norms and other
1-D or special tensors, and tensors already in their planned type, are copied as they are.
OUTPUT is written atomically, after every check.

TYPE, in any case (or its number; Q3_K, Q4_K and Q5_K mean the _M mixes):
   2  Q4_0    4.5 bits per weight: 4-bit values in blocks of 32, one scale each
   3  Q4_1    5.0 bpw: 4-bit values in blocks of 32, a scale and a minimum each
  38  MXFP4_MOE MXFP4 experts (4.25 bpw: E2M1 values, a power-of-two scale per 32), the rest Q8_0
   8  Q5_0    5.5 bpw: 5-bit values in blocks of 32, one scale each
   9  Q5_1    6.0 bpw: 5-bit values in blocks of 32, a scale and a minimum each
  19  IQ2_XXS 2.06 bpw *; attn_v Q2_K (Q4_K if GQA >= 4), first 1/8 ffn_down Q2_K
  20  IQ2_XS  2.31 bpw *; as IQ2_XXS
  28  IQ2_S   2.5 bpw *: IQ2_XS with attn_v, attn_output, first 1/8 ffn_down IQ3_S
  29  IQ2_M   2.7 bpw *: IQ2_S with the same rules as IQ2_S
  24  IQ1_S   1.56 bpw *; as IQ2_XXS, attn_output IQ2_XXS
  31  IQ1_M   1.75 bpw *; as IQ1_S
  10  Q2_K    Q2_K (2.6 bpw); attn_v, attn_output, ffn_down Q3_K (attn_v Q4_K if GQA >= 4)
  21  Q2_K_S  Q2_K *; first 1/8 ffn_down Q4_K, attn_v Q4_K if GQA >= 4
  23  IQ3_XXS 3.06 bpw *; attn_q, attn_k IQ2_S; attn_output IQ3_S; attn_v IQ3_S or Q4_K
  26  IQ3_S   3.44 bpw; attn_v Q4_K if GQA >= 4
  27  IQ3_M   IQ3_S; attn_v, attn_output, first 1/8 ffn_down Q4_K
  22  IQ3_XS  IQ3_S *; attn_q, attn_k and the middle 3/4 ffn_gate/ffn_up IQ3_XXS
  11  Q3_K_S  Q3_K (3.4 bpw) throughout
  12  Q3_K_M  Q3_K; attn_output Q4_K; attn_v, ffn_down Q4_K (Q5_K: first 2 / first 1/16)
  13  Q3_K_L  Q3_K; attn_v, attn_output, ffn_down Q5_K
  25  IQ4_NL  4.5 bpw: a non-linear 4-bit grid in blocks of 32; some attn_v, ffn_down Q5_K
  30  IQ4_XS  4.25 bpw: the same grid in blocks of 256; some attn_v, ffn_down Q5_K
  14  Q4_K_S  Q4_K (4.5 bpw); attn_v of the first 4 and ffn_down of the first 1/8 layers Q5_K
  15  Q4_K_M  Q4_K; attn_v, ffn_down Q6_K in the first and last 1/8 and every third layer
  16  Q5_K_S  Q5_K (5.5 bpw) throughout
  17  Q5_K_M  Q5_K; attn_v, ffn_down Q6_K in the same layers as Q4_K_M
  18  Q6_K    Q6_K (6.6 bpw) throughout
   7  Q8_0    8.5 bpw: 8-bit values in blocks of 32, one scale each
   1  F16     16-bit floats
  32  BF16    bfloat16
   0  F32     32-bit floats
* needs --imatrix where a tensor ends up in IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S or IQ3_XXS
(or Q2_K under Q2_K_S), as llama-quantize refuses it; the token embedding and the output
never need one. A type locus does not make yet is refused by name. Every quantized TYPE but
Q8_0 puts the output head (or the token embedding it shares) in Q6_K (Q5_K for IQ1/IQ2 and
IQ3_XXS; Q8_0 for MXFP4_MOE). A row length that is not a multiple of a type's block falls back as in
llama-quantize: the IQ types to IQ4_NL, Q2_K and Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K
to Q8_0, else F16. An importance matrix also changes some mixes (IQ3_XXS, IQ4_NL, IQ4_XS,
Q4_0, Q5_0), as in llama-quantize.

Options:
      --imatrix FILE      importance matrix from llama-imatrix (its GGUF or .dat form): each
                          row is quantized with its tensor's weights (per expert for MoE);
                          tensors it lacks are quantized without (a note says which)
      --include-weights S use the matrix only for tensors whose name contains S (repeatable)
      --exclude-weights S do not use it for tensors whose name contains S (repeatable; not
                          with --include-weights)
      --tensor-type P=T   tensors whose name matches the regular expression P (lowered to
                          lower case; anywhere in the name unless anchored with ^ or $) get
                          type T; the first match wins, before the mix (repeatable). P takes
                          literals, . * + ? {n,m} [] ^ $ | ( ) \\d \\w \\s and escapes
      --tensor-type-file F  P=T items separated by white space, as --tensor-type
      --output-tensor-type T     output.weight in type T (no fallback)
      --token-embedding-type T   token_embd.weight in type T (no fallback)
      --leave-output-tensor      copy output.weight as it is
      --pure              no mix: every quantized tensor in TYPE's base type (--tensor-type
                          and the fallbacks still apply); F16, BF16 and F32 never mix
      --allow-requantize  taken for llama-quantize's command line; locus always requantizes
  NTHREADS                quantizing threads (default or 0: the CPUs this process may use);
                          the output does not depend on it
  -h, --help              this help
";

pub const TOPO: &str = "\
Usage: locus topo [--json]

Prints what locus sees of the machine: NUMA nodes (CPUs, memory, page cache, hugepages,
memory-only nodes), the distance matrix, the CPUs and nodes this process may use, which NUMA
system calls are allowed (EPERM under Docker's default seccomp profile), numa_balancing, the
transparent hugepage setting, and the kernel tier in use.

Options:
      --json   print one JSON object instead of the table
  -h, --help   this help
";

pub const AUDIT: &str = concat!(
    "\
Usage: locus audit -m FILE [--numa MODE] [-t N] [-c N] [--json]

Places the model and a KV cache exactly as `locus run` would and evaluates one token, then
reports per tensor and copy the pages on each node (move_pages, or /proc/self/numa_maps where
that is refused), totals per node, how much of the model file is still in the page cache, and
locality: the share of the weight bytes each thread reads per token that sit on its own node.
Last, the KV cache: each KV head's block is placed, by first touch, on the node of the threads
that compute that head; its written pages per node, the bytes not yet written, and the share of written pages on
their writers' node.

Options:
  -m, --model FILE        GGUF model file
  -t, --threads N         worker threads (default: the CPUs of the nodes in use)
  -c, --ctx-size N        the KV cache's context (default: as `locus run`: 4096, or the
                          training context where less; 0 = the training context)
",
    numa_options_help!(),
    "      --json              print one JSON object (mode, nodes, copies, page_cache_bytes,
                          locality, kv_cache, warnings, ...)
  -h, --help              this help
"
);
