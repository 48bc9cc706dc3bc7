//! Placement: the bridge between `sys` (nodes, policies, pinning) and `model` (tensors). It
//! decides a [`Plan`] (mode, threads per node, where each matrix's rows live), builds the
//! [`WeightStore`] of placed copies, hands the forward pass one view per node through
//! [`Placement::bind`], builds the node-grouped, pinned [`Pool`], and audits where every page
//! landed ([`audit`]).
//!
//! Every mode runs the same forward pass: a thread reads its rows from its node's view.
//! Placement is a property of the views, never an `if mode` in the model code.

pub mod audit;
pub mod cache;
pub mod plan;
pub mod release;
pub mod store;

use std::fmt;
use std::sync::{Arc, Mutex};

pub use plan::{Mode, Options, Pin, Plan, PlanError, Store};
use release::{ChunkCounts, FOLIO_MAX_BYTES};
pub use store::{BuildError, WeightStore};

use crate::kernels::{Kernels, Layout};
use crate::model::weights::{Matrix, Weights};
use crate::model::{Config, ModelError, ModelFile};
use crate::pool::{Pool, SpawnError};
use crate::sys::probe::Capabilities;
use crate::sys::topology::{NumaBalancing, Topology, TopologyError};
use crate::sys::{affinity, memory, mempolicy};

/// Why placement failed.
#[derive(Debug)]
pub enum PlacementError {
    Topology(TopologyError),
    Plan(PlanError),
    Model(ModelError),
    /// A copy could not be built and `--strict` forbids falling back.
    Strict(BuildError),
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementError::Topology(e) => write!(f, "{e}"),
            PlacementError::Plan(e) => write!(f, "{e}"),
            PlacementError::Model(e) => write!(f, "{e}"),
            PlacementError::Strict(e) => write!(
                f,
                "--strict: {e}; free memory, use fewer copies (--numa shard) or drop --strict to fall back"
            ),
        }
    }
}

impl std::error::Error for PlacementError {}

/// A model's weights placed for a run.
pub struct Placement {
    pub topo: Topology,
    pub caps: Capabilities,
    pub plan: Plan,
    pub store: WeightStore,
    /// Everything the user should know, one line each (also printed by the commands).
    pub warnings: Vec<String>,
    /// The file's bytes holding the weights, released once the copies are in use.
    file_span: Option<std::ops::Range<usize>>,
}

impl Placement {
    /// Detects the host, plans for `opts` and builds the copies of `file`'s weights.
    pub fn build(file: &ModelFile, opts: &Options) -> Result<Placement, PlacementError> {
        let topo = Topology::detect().map_err(PlacementError::Topology)?;
        Placement::build_on(file, opts, topo)
    }

    /// As [`Placement::build`], on a given topology.
    pub fn build_on(
        file: &ModelFile,
        opts: &Options,
        topo: Topology,
    ) -> Result<Placement, PlacementError> {
        // The fill asks for what it reads next (WILLNEED) and drops what it has copied; the
        // kernel's read-around (up to the disk's read_ahead_kb: 8 MiB here) would pull most of
        // a small file in ahead of it, so the mapping reads only what is touched until the
        // copies are built. Once they are, the mapping serves only what the model still reads
        // from it at load (norms, biases: a few pages each), so it stays without read-around,
        // which would pull megabytes the fill dropped back in around each; with no copies, the
        // weights stream from it again. Advice, best effort both ways.
        let _ = memory::madvise(file.bytes(), memory::MADV_RANDOM);
        let built = Placement::build_copies(file, opts, topo);
        if !matches!(&built, Ok(p) if !p.store.is_empty()) {
            let _ = memory::madvise(file.bytes(), memory::MADV_NORMAL);
        }
        built
    }

    fn build_copies(
        file: &ModelFile,
        opts: &Options,
        topo: Topology,
    ) -> Result<Placement, PlacementError> {
        let caps = Capabilities::probe(topo.node_mask_bits());
        let g = file.gguf().map_err(PlacementError::Model)?;
        let config = Config::from_gguf(&g).map_err(PlacementError::Model)?;
        let weights = Weights::from_gguf(&g, &config).map_err(PlacementError::Model)?;
        let mats = weights.matrices();
        // The table the model will load with (the same detection): copies are packed for it.
        let kernels = Kernels::detect().ok();
        let packed = |m: &&&Matrix| store::copy_layout(kernels.as_ref(), m) != Layout::Rows;
        let need = plan::Need {
            copy_bytes: mats.iter().map(|m| m.file.data.len() as u64).sum(),
            packed_bytes: mats
                .iter()
                .filter(packed)
                .map(|m| m.file.data.len() as u64)
                .sum(),
        };
        let mut warnings = Vec::new();
        if topo.nodes.len() > 1 && matches!(topo.numa_balancing, NumaBalancing::On { .. }) {
            warnings.push(
                "kernel NUMA balancing is on: it may migrate pages behind locus's back (echo 0 > /proc/sys/kernel/numa_balancing)".into(),
            );
        }
        let mut o = opts.clone();
        let mut plan = Plan::new(&topo, &o, need).map_err(PlacementError::Plan)?;
        let base = file.bytes().as_ptr() as usize;
        let offsets = |d: &[u8]| d.as_ptr() as usize - base..d.as_ptr() as usize - base + d.len();
        let span = data_span(&mats, base);
        let will_need = |addrs: std::ops::Range<usize>| ask_for(file, addrs);
        let store = loop {
            // Counted afresh for every attempt (each fill counts its own reads).
            let counts = ChunkCounts::new(span.clone(), FOLIO_MAX_BYTES, memory::page_size());
            let expect = |data: &[u8]| counts.expect(&offsets(data));
            let release = |data: &[u8]| {
                for r in counts.done(&offsets(data)) {
                    drop_file_range(file, r);
                }
            };
            let hooks = store::FileHooks {
                will_need: &will_need,
                expect: &expect,
                release: &release,
            };
            let host = store::Host {
                topo: &topo,
                caps: &caps,
                kernels: kernels.as_ref(),
                file: Some(&hooks),
            };
            match WeightStore::build(&plan, &host, &mats, opts.progress) {
                Ok(s) => break s,
                Err(e) if opts.strict => return Err(PlacementError::Strict(e)),
                Err(e) => {
                    let next = plan.mode.fallback().unwrap_or(Mode::Off);
                    warnings.push(format!(
                        "{}: {e}; released what was built and falling back to {next}",
                        plan.mode
                    ));
                    o.mode = next;
                    plan = Plan::new(&topo, &o, need).map_err(PlacementError::Plan)?;
                }
            }
        };
        warnings.extend(plan.fallbacks.iter().cloned());
        warnings.extend(store.warnings.iter().cloned());
        let file_span = (!store.is_empty()).then_some(span);
        if let Some(p) = &caps.start_policy {
            if p.mode != mempolicy::MPOL_DEFAULT && plan.store == Store::File {
                warnings.push(format!(
                    "this process started with memory policy {} (numactl?); weights read from the page cache follow it",
                    mempolicy::mode_name(p.mode)
                ));
            }
        }
        drop(mats);
        drop(weights);
        Ok(Placement {
            topo,
            caps,
            plan,
            store,
            warnings,
            file_span,
        })
    }

    /// Once the model is loaded (every tensor read that will come from the file has been
    /// made), drops the file's weight pages from this process and the page cache, so no
    /// hidden extra copy of the weights stays resident. A no-op for file-backed modes.
    pub fn release_file_pages(&self, file: &ModelFile) -> Result<(), String> {
        let Some(span) = self.file_span.clone() else {
            return Ok(());
        };
        let bytes = file.bytes();
        if span.end > bytes.len() {
            return Err("the model file's mapping is smaller than planned".into());
        }
        // SAFETY: `span` lies in the model file's private read-only mapping, which nobody
        // writes; the pages refault unchanged if anything reads them again.
        unsafe { memory::drop_file_pages(&bytes[span.clone()], file.fd(), span.start as u64) }
            .map_err(|e| format!("{e}: the model file's pages may stay in the page cache"))
    }

    /// Points the weights' matrices at the placed copies (a no-op for file-backed modes).
    pub fn bind<'s>(&'s self, w: &mut Weights<'s>) {
        self.store.bind(w);
    }

    /// The thread pool for this plan: one group per slot, each thread pinned as planned
    /// (the calling thread becomes thread 0 and is pinned too). A thread that cannot be
    /// pinned runs where the scheduler puts it, and the returned warnings say so.
    pub fn pool(&self) -> Result<(Pool, Vec<String>), SpawnError> {
        let cpus = self.topo.allowed_cpus.len();
        let mut notes = Vec::new();
        let mut plan = self.plan.clone();
        if plan.threads > cpus && plan.poll > 0 {
            // Spinning threads would only take CPU time from the ones with work.
            notes.push(format!(
                "{} threads on {cpus} CPUs: idle threads sleep instead of spinning (--poll 0)",
                plan.threads
            ));
            plan.poll = 0;
        }
        let (pool, mut warnings) = self.pool_for(plan)?;
        notes.append(&mut warnings);
        Ok((pool, notes))
    }

    fn pool_for(&self, plan: Plan) -> Result<(Pool, Vec<String>), SpawnError> {
        if fault("spawn").is_some() && plan.threads > 1 {
            return Err(SpawnError {
                thread: 1,
                threads: plan.threads,
                err: std::io::Error::from_raw_os_error(libc::EAGAIN),
            });
        }
        if !plan.pinned() {
            let pool = Pool::try_new(plan.threads, |_| {})?;
            pool.set_poll(plan.poll);
            return Ok((pool, Vec::new()));
        }
        let (poll, threads, sizes) = (plan.poll, plan.threads, plan.group_sizes());
        let plan = Arc::new(plan);
        let failed: Arc<Mutex<Vec<String>>> = Arc::default();
        let f2 = Arc::clone(&failed);
        let pool = Pool::try_grouped(&sizes, move |tid| {
            let Some(cpus) = plan.cpus_of_thread(tid) else {
                return;
            };
            let r = match fault("pin") {
                Some(_) => Err(crate::sys::SysError {
                    call: "sched_setaffinity",
                    errno: libc::EINVAL,
                }),
                None => affinity::set_affinity(&cpus),
            };
            if let Err(e) = r {
                f2.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                    "thread {tid}: pinning to CPUs {} failed: {e}",
                    cpus.to_list()
                ));
            }
        })?;
        pool.set_poll(poll);
        // Every worker has run its hook once it has run a step.
        pool.run(&|_| {});
        let mut failed = std::mem::take(&mut *failed.lock().unwrap_or_else(|e| e.into_inner()));
        if !failed.is_empty() {
            failed.sort();
            let n = failed.len();
            let first = failed.swap_remove(0);
            failed = vec![format!(
                "{n} of {threads} threads could not be pinned and run unpinned (locality is not guaranteed; see `locus topo` for the allowed CPUs); first: {first}"
            )];
        }
        Ok((pool, failed))
    }

    /// `mirror on nodes 0,1 (2+2 threads, pinned), 2 copies, 270 MiB placed in 0.40 s
    /// (0.71 GB/s)`.
    pub fn summary(&self) -> String {
        let mut s = self.plan.summary();
        if let Some(rate) = self.placed_gb_per_s() {
            s.push_str(&format!(
                ", {:.1} MiB placed in {:.2} s ({rate:.2} GB/s)",
                self.store.bytes as f64 / (1u64 << 20) as f64,
                self.store.elapsed.as_secs_f64()
            ));
        }
        s
    }

    /// How fast the copies were built, all nodes together: bytes copied ÷ the build's time,
    /// GB/s (`None` where nothing was copied).
    pub fn placed_gb_per_s(&self) -> Option<f64> {
        let secs = self.store.elapsed.as_secs_f64();
        (!self.store.is_empty() && self.store.bytes > 0 && secs > 0.0)
            .then(|| self.store.bytes as f64 / 1e9 / secs)
    }
}

/// A test hook from `LOCUS_FAULT` (`alloc:N`, `hugepages`, `pin`, `spawn`: the pool's (and
/// membw's) second thread cannot be started, as under a pids limit, `fill-spawn`: no thread
/// that fills a copy can; `arm-signal:N`, `deaf`: see bench and gen-model): the value after the
/// colon (empty without one) when the variable names `kind`.
pub(crate) fn fault(kind: &str) -> Option<String> {
    let spec = std::env::var("LOCUS_FAULT").ok()?;
    let rest = spec.strip_prefix(kind)?;
    match rest.strip_prefix(':') {
        Some(v) => Some(v.to_string()),
        None if rest.is_empty() => Some(String::new()),
        None => None,
    }
}

/// Drops the file offsets `r` (whole pages, all of them copied) from this process and the page
/// cache while the rest of the model is still being copied. Best effort: what this cannot
/// drop, [`Placement::release_file_pages`] drops (and reports).
fn drop_file_range(file: &ModelFile, r: std::ops::Range<usize>) {
    let Some(bytes) = file.bytes().get(r.clone()) else {
        return;
    };
    // SAFETY: `bytes` lies in the model file's private read-only mapping, which starts on a
    // page, so `r.start` is its file offset; nobody writes it, and pages read again refault
    // unchanged.
    let _ = unsafe { memory::drop_file_pages(bytes, file.fd(), r.start as u64) };
}

/// Starts reading `addrs`, addresses in `file`'s mapping, into the page cache (advice).
fn ask_for(file: &ModelFile, addrs: std::ops::Range<usize>) {
    let base = file.bytes().as_ptr() as usize;
    let len = file.bytes().len();
    let lo = addrs.start.saturating_sub(base).min(len);
    let hi = addrs.end.saturating_sub(base).min(len);
    if hi > lo {
        let _ = memory::fadvise_willneed(file.fd(), lo as u64, (hi - lo) as u64);
    }
}

/// The byte range of the file (offsets from `base`, the mapping's start) holding every matrix.
fn data_span(mats: &[&crate::model::weights::Matrix], base: usize) -> std::ops::Range<usize> {
    let lo = mats.iter().map(|m| m.file.data.as_ptr() as usize).min();
    let hi = mats
        .iter()
        .map(|m| m.file.data.as_ptr() as usize + m.file.data.len())
        .max();
    match (lo, hi) {
        (Some(lo), Some(hi)) => lo - base..hi - base,
        _ => 0..0,
    }
}
