//! locus — a CPU inference engine for GGUF language models that places weights on purpose
//! across NUMA nodes.
//!
//! The crate's map:
#![deny(unsafe_op_in_unsafe_fn)]

/// The commands behind the CLI (run, perplexity, tokenize, quantize).
pub mod app;
/// One buffer written by many threads, each its own parts: the disjoint writer every parallel
/// step uses, borrowing the buffer so it cannot be freed under the threads.
pub mod disjoint;
/// The one JSON codec: values, the strict reader, the writer and its string escaping (serve,
/// bench, topo, audit and the tests share it).
pub mod json;
/// Compute kernels: block formats, dot products, the runtime dispatch table. Knows no files.
pub mod kernels;
/// Models: GGUF, weights, the llama forward pass, tokenizer, sampler, chat templates.
pub mod model;
/// Placement: modes, the plan, placed copies of the weights, the audit. Knows nodes and tensors.
pub mod placement;
/// The worker pool that runs every parallel step of the forward pass.
pub mod pool;
/// The shared runtime: place, load, pool, context sizing, KV cache placement — what `run`,
/// `perplexity`, `bench`, `audit` and `serve` all use.
pub mod runtime;
/// `locus serve`: HTTP/1.1, the OpenAI-compatible API, the continuous-batching scheduler.
pub mod serve;
/// Linux: topology from sysfs, affinity, memory-policy syscalls, the capability probe. Knows no models.
pub mod sys;

/// The test helpers the integration tests use too (tests/common): counted skips, seeded
/// property tests, the seccomp filter of a container.
#[cfg(test)]
#[path = "../tests/common"]
mod test_support {
    pub mod qc;
    pub mod seccomp;
    pub mod skip;
}
