//! The server's counters, and `/metrics` in Prometheus' text format (version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::placement::cache::{CacheAudit, CacheRegion};

/// A generation request's place ([`Metrics::enter`]).
pub struct InFlight<'m>(&'m Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Upper bounds (seconds) of the time-to-first-token histogram's buckets.
pub const TTFT_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Everything `/metrics` reports; shared by the engine and the connections.
pub struct Metrics {
    /// Requests answered, by (endpoint, status).
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    cancelled: AtomicU64,
    /// Requests accepted and not yet given a slot.
    queued: AtomicUsize,
    /// Requests accepted and not yet answered (waiting or running): at most the slots and
    /// the queue's places.
    in_flight: AtomicUsize,
    busy_slots: AtomicUsize,
    slots: usize,
    /// f64 bits.
    decode_rate: AtomicU64,
    ttft: [AtomicU64; TTFT_BUCKETS.len() + 1],
    /// f64 bits of the sum, in seconds.
    ttft_sum: AtomicU64,
    open_connections: AtomicUsize,
    /// The placement mode, and its audited locality at load (`None`: nothing located); set
    /// once the weights are placed.
    placement: OnceLock<(String, Option<f64>)>,
    /// The slots' caches, and their last audit (refreshed at most every [`KV_AUDIT_EVERY`]).
    kv: OnceLock<(Vec<CacheRegion>, usize)>,
    kv_audit: Mutex<Option<(Instant, CacheAudit)>>,
    /// llama-server's counters and the slot board (`GET /slots`).
    pub native: super::llamacpp::NativeStats,
}

/// The KV cache's pages are located again at most this often (a scrape every second must not
/// cost a page walk every second).
pub const KV_AUDIT_EVERY: Duration = Duration::from_secs(2);

impl Metrics {
    pub fn new(slots: usize) -> Metrics {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            busy_slots: AtomicUsize::new(0),
            slots,
            decode_rate: AtomicU64::new(0),
            ttft: Default::default(),
            ttft_sum: AtomicU64::new(0),
            open_connections: AtomicUsize::new(0),
            placement: OnceLock::new(),
            kv: OnceLock::new(),
            kv_audit: Mutex::new(None),
            native: super::llamacpp::NativeStats::new(slots),
        }
    }

    /// Records where the slots' caches are and how many copies each keeps (one per node for
    /// a latent cache), once.
    pub fn set_kv_cache(&self, regions: Vec<CacheRegion>, copies: usize) {
        let _ = self.kv.set((regions, copies));
    }

    fn kv_audit(&self) -> Option<CacheAudit> {
        let (regions, _) = self.kv.get()?;
        let mut last = self.kv_audit.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some((at, a)) if at.elapsed() < KV_AUDIT_EVERY => Some(a.clone()),
            _ => {
                let a = crate::placement::cache::audit(regions);
                *last = Some((Instant::now(), a.clone()));
                Some(a)
            }
        }
    }

    /// Records how the weights were placed (once).
    pub fn set_placement(&self, mode: String, locality: Option<f64>) {
        let _ = self.placement.set((mode, locality));
    }

    pub fn answered(&self, endpoint: &str, status: u16) {
        // A poisoned lock (a panic elsewhere while it was held) still holds valid counts.
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((endpoint.to_string(), status)).or_insert(0) += 1;
    }

    pub fn prompt_tokens(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn generated_tokens(&self, n: usize) {
        self.generated_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a place in the queue, unless `cap` requests already wait.
    pub fn try_enqueue(&self, cap: usize) -> bool {
        self.queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                (q < cap).then_some(q + 1)
            })
            .is_ok()
    }

    /// Takes a place for a generation request, unless every slot is taken and `cap` requests
    /// already wait for one (`--queue`); the place is given back when the guard drops (the
    /// request answered, or its client gone). The request counts as queued until the engine
    /// gives it a slot ([`Metrics::dequeued`]).
    pub fn enter(&self, cap: usize) -> Option<InFlight<'_>> {
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.slots.saturating_add(cap)).then_some(n + 1)
            })
            .ok()?;
        self.queued.fetch_add(1, Ordering::SeqCst);
        Some(InFlight(self))
    }

    pub fn dequeued(&self) {
        let _ = self
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| q.checked_sub(1));
    }

    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    pub fn set_busy(&self, busy: usize) {
        self.busy_slots.store(busy, Ordering::Relaxed);
    }

    pub fn busy(&self) -> usize {
        self.busy_slots.load(Ordering::Relaxed)
    }

    pub fn set_decode_rate(&self, r: f64) {
        self.decode_rate.store(r.to_bits(), Ordering::Relaxed);
    }

    pub fn first_token(&self, d: Duration) {
        let s = d.as_secs_f64();
        let b = TTFT_BUCKETS
            .iter()
            .position(|&ub| s <= ub)
            .unwrap_or(TTFT_BUCKETS.len());
        self.ttft[b].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .ttft_sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some((f64::from_bits(v) + s).to_bits())
            });
    }

    /// Takes a connection, unless `cap` are open; the guard gives it back.
    pub fn open_connection(&self, cap: usize) -> Option<ConnectionGuard<'_>> {
        self.open_connections
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                (c < cap).then_some(c + 1)
            })
            .ok()
            .map(|_| ConnectionGuard(self))
    }

    pub fn open_connections(&self) -> usize {
        self.open_connections.load(Ordering::SeqCst)
    }

    /// The text `/metrics` serves.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let head = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(
                out,
                "# HELP locus_{name} {help}\n# TYPE locus_{name} {kind}"
            );
        };
        head(
            &mut out,
            "requests_total",
            "counter",
            "HTTP requests answered, by endpoint and status.",
        );
        for ((ep, st), n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "locus_requests_total{{endpoint=\"{ep}\",status=\"{st}\"}} {n}"
            );
        }
        let counters = [
            (
                "prompt_tokens_total",
                "Prompt tokens evaluated (cached prefixes not counted).",
                &self.prompt_tokens,
            ),
            (
                "generated_tokens_total",
                "Tokens generated.",
                &self.generated_tokens,
            ),
            (
                "cancelled_total",
                "Requests whose client went away before the end.",
                &self.cancelled,
            ),
        ];
        for (name, help, v) in counters {
            head(&mut out, name, "counter", help);
            let _ = writeln!(out, "locus_{name} {}", v.load(Ordering::Relaxed));
        }
        let gauges = [
            (
                "queue_depth",
                "Requests waiting for a slot.",
                self.queued() as f64,
            ),
            ("slots_busy", "Slots serving a request.", self.busy() as f64),
            ("slots", "Slots in all (-np).", self.slots as f64),
            (
                "open_connections",
                "Client connections open.",
                self.open_connections() as f64,
            ),
            (
                "decode_tokens_per_second",
                "Tokens decoded per second over the last 5 s, all slots together.",
                f64::from_bits(self.decode_rate.load(Ordering::Relaxed)),
            ),
        ];
        for (name, help, v) in gauges {
            head(&mut out, name, "gauge", help);
            let _ = writeln!(out, "locus_{name} {v}");
        }
        head(
            &mut out,
            "time_to_first_token_seconds",
            "histogram",
            "From a request's arrival to its first generated token.",
        );
        let mut cum = 0;
        for (i, c) in self.ttft.iter().enumerate() {
            cum += c.load(Ordering::Relaxed);
            let le = TTFT_BUCKETS
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "locus_time_to_first_token_seconds_bucket{{le=\"{le}\"}} {cum}"
            );
        }
        let _ = writeln!(
            out,
            "locus_time_to_first_token_seconds_sum {}",
            f64::from_bits(self.ttft_sum.load(Ordering::Relaxed))
        );
        let _ = writeln!(out, "locus_time_to_first_token_seconds_count {cum}");
        if let Some((mode, locality)) = self.placement.get() {
            head(
                &mut out,
                "placement_info",
                "gauge",
                "The placement mode the weights were placed with (value 1).",
            );
            let _ = writeln!(out, "locus_placement_info{{mode=\"{mode}\"}} 1");
            head(&mut out, "placement_locality", "gauge", "Share of the weight bytes each thread reads that sit on its own node, audited at load (NaN: no page located).");
            let _ = writeln!(
                out,
                "locus_placement_locality {}",
                locality.map_or("NaN".to_string(), |l| l.to_string())
            );
        }
        if let Some(a) = self.kv_audit() {
            head(
                &mut out,
                "kv_cache_bytes",
                "gauge",
                "KV cache bytes written so far, by the node their pages are on (all slots).",
            );
            for (n, b) in &a.bytes_by_node {
                let _ = writeln!(out, "locus_kv_cache_bytes{{node=\"{n}\"}} {b}");
            }
            head(
                &mut out,
                "kv_cache_unlocated_bytes",
                "gauge",
                "KV cache bytes whose pages are not located (not written yet).",
            );
            let _ = writeln!(out, "locus_kv_cache_unlocated_bytes {}", a.unlocated_bytes);
            head(&mut out, "kv_cache_locality", "gauge", "Share of the located KV cache bytes on the node of the threads that write and read them (NaN: none located).");
            let _ = writeln!(
                out,
                "locus_kv_cache_locality {}",
                a.locality.map_or("NaN".to_string(), |l| l.to_string())
            );
            let copies = self.kv.get().map_or(1, |k| k.1);
            head(&mut out, "kv_cache_copies", "gauge", "Copies of each slot's KV cache: one per node for latent attention (every head reads every cell), else 1.");
            let _ = writeln!(out, "locus_kv_cache_copies {copies}");
        }
        let shared = super::llamacpp::SharedCounts {
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            generated_tokens: self.generated_tokens.load(Ordering::Relaxed),
            busy: self.busy(),
            queued: self.queued(),
        };
        self.native.render(&mut out, &shared);
        out
    }
}

/// An open connection's place under the connection cap.
pub struct ConnectionGuard<'m>(&'m Metrics);

impl Drop for ConnectionGuard<'_> {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_cap_counts_only_requests_beyond_the_slots() {
        let m = Metrics::new(4);
        // --queue 0 with idle slots: every slot's request is taken, the fifth is not.
        let places: Vec<_> = (0..4).map(|_| m.enter(0).expect("an idle slot")).collect();
        assert!(m.enter(0).is_none());
        // --queue 1: one more may wait.
        let waiting = m.enter(1).expect("a queue place");
        assert!(m.enter(1).is_none());
        drop(waiting);
        assert!(m.enter(1).is_some(), "a place given back is free again");
        drop(places);
        assert_eq!(m.in_flight.load(Ordering::SeqCst), 0);
    }
}
