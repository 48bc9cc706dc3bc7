//! A fixed pool of worker threads that all run the same job, each with its own index.
//!
//! The forward pass is a sequence of short parallel steps (a matrix-vector product, attention
//! over heads). Each step is `pool.run(&|tid| ...)`: the caller becomes thread 0, workers
//! 1..n run the closure with their index, and `run` returns when every thread is done. Workers
//! spin briefly between steps (steps are microseconds apart during decode), then sleep on a
//! condition variable so an idle engine burns no CPU.
//!
//! Threads come in **groups** (one per NUMA node in use), numbered contiguously: group 0 has
//! threads `0..a`, group 1 `a..b`, and so on. Completion is a two-level barrier: each thread
//! counts down its group's counter, and the last of a group counts down the global one, so
//! most of the traffic stays on cache lines of the thread's own node.
//!
//! The per-step path takes no lock and allocates nothing: the job is published through an
//! atomic pointer, and the condition variable is signalled only when some worker sleeps.
//!
//! One step at a time: the job pointer, the counters and the generation belong to the step in
//! progress, so a second `run` entered meanwhile (from another thread sharing the `&Pool`, or
//! from inside a job) would overwrite them under the workers' feet. `run` refuses that with a
//! panic that says so; callers that share an engine between threads serialise their steps.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Spins before a waiting thread starts yielding its CPU, at the default polling level.
const SPIN_ITERS: u32 = 1 << 10;
/// The default polling level (llama.cpp's `--poll`: 0 = no spinning, 100 = twice the default).
pub const DEFAULT_POLL: u32 = 50;

type Job<'a> = dyn Fn(usize) + Sync + 'a;

/// A counter on its own cache line (so groups do not share lines).
#[repr(align(128))]
struct Padded(AtomicUsize);

struct Shared {
    /// Bumped once per step; workers run the job when they see a new value.
    generation: AtomicUsize,
    /// Points at the caller's `&Job` for the current step. Written by `run` before
    /// `generation` is bumped (the bump releases it), read by workers after they observe it.
    job: AtomicPtr<()>,
    /// Per group: threads still running the current step.
    group_left: Vec<Padded>,
    /// Groups still running the current step.
    groups_left: Padded,
    panicked: AtomicBool,
    /// A `run` is in progress (see the module's "one step at a time").
    running: AtomicBool,
    stop: AtomicBool,
    /// Workers asleep (or about to sleep) on `wake`.
    sleepers: AtomicUsize,
    /// Spins before yielding (from the polling level).
    spin: AtomicU32,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

/// A worker thread could not be started (a pids limit in a container, `ulimit -u`, memory
/// for its stack).
#[derive(Debug)]
pub struct SpawnError {
    /// The thread that failed (0-based; the caller is thread 0) and how many were asked for.
    pub thread: usize,
    pub threads: usize,
    pub err: std::io::Error,
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot start worker thread {} of {}: {} (a limit on threads or processes, such as \
             a container's pids.max or ulimit -u?); use fewer threads (-t {})",
            self.thread,
            self.threads,
            self.err,
            self.thread.max(1)
        )
    }
}

impl std::error::Error for SpawnError {}

/// A pool of `n` threads (the caller counts as one), in groups.
pub struct Pool {
    n: usize,
    groups: Vec<Range<usize>>,
    group_of: Vec<usize>,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool of `n` threads in all (`n - 1` workers plus the caller), one group. `hook(i)`
    /// runs first on each worker thread `i`; it is not run for the caller.
    ///
    /// # Panics
    /// Where a thread cannot be started; commands use [`Pool::try_new`].
    pub fn new(n: usize, hook: impl Fn(usize) + Send + Sync + 'static) -> Pool {
        Pool::try_new(n, hook).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Pool::new`], or the error of the first thread that could not be started (the
    /// threads started before it are stopped and joined).
    pub fn try_new(
        n: usize,
        hook: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<Pool, SpawnError> {
        Pool::build(&[n.max(1)], hook)
    }

    /// A pool whose group `g` has `sizes[g]` threads, numbered contiguously. `hook(i)` runs
    /// first on each thread `i`, the caller (thread 0) included, before `grouped` returns
    /// (used to pin each thread to its node). Empty groups are not allowed.
    ///
    /// # Panics
    /// Where a thread cannot be started; commands use [`Pool::try_grouped`].
    pub fn grouped(sizes: &[usize], hook: impl Fn(usize) + Send + Sync + 'static) -> Pool {
        Pool::try_grouped(sizes, hook).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Pool::grouped`], or the error of the first thread that could not be started.
    pub fn try_grouped(
        sizes: &[usize],
        hook: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<Pool, SpawnError> {
        assert!(
            !sizes.is_empty() && sizes.iter().all(|&s| s > 0),
            "every pool group needs a thread"
        );
        hook(0);
        Pool::build(sizes, hook)
    }

    fn build(
        sizes: &[usize],
        hook: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<Pool, SpawnError> {
        let n: usize = sizes.iter().sum();
        let mut groups = Vec::with_capacity(sizes.len());
        let mut group_of = Vec::with_capacity(n);
        for (g, &size) in sizes.iter().enumerate() {
            let start = group_of.len();
            group_of.extend(std::iter::repeat_n(g, size));
            groups.push(start..start + size);
        }
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            group_left: sizes.iter().map(|_| Padded(AtomicUsize::new(0))).collect(),
            groups_left: Padded(AtomicUsize::new(0)),
            panicked: AtomicBool::new(false),
            running: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            spin: AtomicU32::new(SPIN_ITERS),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let hook = Arc::new(hook);
        let mut pool = Pool {
            n,
            groups,
            group_of,
            shared,
            workers: Vec::with_capacity(n.saturating_sub(1)),
        };
        for tid in 1..n {
            let shared = Arc::clone(&pool.shared);
            let hook = Arc::clone(&hook);
            let group = pool.group_of[tid];
            let spawned = std::thread::Builder::new()
                .name(format!("locus-{tid}"))
                .spawn(move || {
                    hook(tid);
                    worker(tid, group, &shared)
                });
            match spawned {
                Ok(h) => pool.workers.push(h),
                // Dropping the pool stops and joins the workers started so far.
                Err(err) => {
                    return Err(SpawnError {
                        thread: tid,
                        threads: n,
                        err,
                    })
                }
            }
        }
        Ok(pool)
    }

    pub fn threads(&self) -> usize {
        self.n
    }

    /// Sets how long waiting threads spin before yielding and sleeping: `poll` 0 never spins
    /// (best where threads outnumber CPUs: VMs, CPU quotas), 50 is the default, 100 spins twice
    /// as long.
    pub fn set_poll(&self, poll: u32) {
        let iters = (SPIN_ITERS as u64 * poll.min(100) as u64 / DEFAULT_POLL as u64) as u32;
        self.shared.spin.store(iters, Ordering::Relaxed);
    }

    /// The group (node slot) thread `tid` belongs to.
    #[inline]
    pub fn group_of(&self, tid: usize) -> usize {
        self.group_of[tid]
    }

    /// The threads of each group, in order.
    pub fn groups(&self) -> &[Range<usize>] {
        &self.groups
    }

    /// Runs `f(tid)` on every thread, `tid` in `0..threads()`, and returns when all are done.
    ///
    /// # Panics
    /// If another `run` on this pool is in progress (entered from another thread, or from
    /// inside a job): the pool serves one step at a time. Also re-raises a panic of `f`.
    pub fn run<F: Fn(usize) + Sync>(&self, f: &F) {
        let _entered = Entered::new(&self.shared.running);
        if self.n == 1 {
            f(0);
            return;
        }
        let s = &*self.shared;
        let job: &Job<'_> = f;
        for (g, r) in self.groups.iter().enumerate() {
            s.group_left[g].0.store(r.len(), Ordering::Relaxed);
        }
        s.groups_left.0.store(self.groups.len(), Ordering::Relaxed);
        // Workers read `job` through this pointer; it stays valid until `run` returns, which
        // is after every worker has finished with it (the barrier below).
        s.job
            .store(&job as *const &Job<'_> as *mut (), Ordering::Relaxed);
        s.generation.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        arrive(s, 0);
        let (mut spins, limit) = (0u32, s.spin.load(Ordering::Relaxed));
        while s.groups_left.0.load(Ordering::Acquire) != 0 {
            spins = backoff(spins, limit);
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::AcqRel) {
            panic!("a worker thread panicked during a parallel step");
        }
    }
}

/// Holds a pool's `running` flag for one `run`, and clears it however `run` ends.
struct Entered<'a>(&'a AtomicBool);

impl<'a> Entered<'a> {
    fn new(running: &'a AtomicBool) -> Entered<'a> {
        // Acquire pairs with the Release in `drop`: the previous step is wholly over.
        if running.swap(true, Ordering::Acquire) {
            panic!(
                "Pool::run entered while another run on the same pool is in progress (from \
                 another thread or from inside a job); a pool runs one step at a time"
            );
        }
        Entered(running)
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Counts a thread of `group` out of the current step (the two-level barrier).
#[inline]
fn arrive(s: &Shared, group: usize) {
    if s.group_left[group].0.fetch_sub(1, Ordering::AcqRel) == 1 {
        s.groups_left.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn backoff(spins: u32, limit: u32) -> u32 {
    if spins < limit {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    spins.saturating_add(1)
}

fn worker(tid: usize, group: usize, s: &Shared) {
    let mut seen = 0usize;
    loop {
        let (mut spins, limit) = (0u32, s.spin.load(Ordering::Relaxed));
        loop {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            // After spinning a worker sleeps: yielding instead kept it runnable, and on a busy
            // host runnable waiters took the CPU time the threads with work needed, so decode
            // collapsed on a loaded two-core machine (figures: BENCHMARKS.md, "Design
            // measurements behind the code").
            if spins < limit {
                spins = backoff(spins, limit);
            } else {
                let guard = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                if s.generation.load(Ordering::SeqCst) == seen && !s.stop.load(Ordering::SeqCst) {
                    drop(s.wake.wait(guard));
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let p = s.job.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `run` stored a pointer to its live `&Job` before bumping the generation
            // we observed (Acquire above pairs with that SeqCst bump) and keeps it alive until
            // every thread has arrived at the barrier, which this thread does only below.
            let f: &Job<'_> = unsafe { *(p as *const &Job<'_>) };
            if catch_unwind(AssertUnwindSafe(|| f(tid))).is_err() {
                s.panicked.store(true, Ordering::Release);
            }
        }
        arrive(s, group);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _g = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The rows `[start, end)` of a matrix of `rows` rows that thread `tid` of `nth` computes.
/// Placement stores a group's rows where that group runs, so both sides use this one rule.
#[inline]
pub fn rows_of_thread(rows: usize, tid: usize, nth: usize) -> (usize, usize) {
    split(rows, tid, nth)
}

/// The rows a group of consecutive threads `threads` (of `nth`) computes together.
pub fn rows_of_group(rows: usize, threads: &Range<usize>, nth: usize) -> (usize, usize) {
    if threads.is_empty() {
        return (0, 0);
    }
    (
        split(rows, threads.start, nth).0,
        split(rows, threads.end - 1, nth).1,
    )
}

/// A group's rows `[lo, hi)` shared among its threads for one parallel step. Each thread owns
/// a contiguous run and takes it front to back, so its reads stay one stream (the kernels'
/// prefetch of the rows past a chunk is the start of its next). A thread done with its own run
/// steals from the back of the others' runs, so a thread that runs slower (a busier core, a
/// later wake-up) does less.
///
/// Runs are cut into units of about 1/[`UNITS_PER_THREAD`] of a thread's share. An owner takes
/// up to [`OWN_UNITS`] at a time (fewer calls), fewer as its run shrinks; a thief takes one. So
/// the wait at the step's barrier is about one unit. Units are whole numbers of `step` rows
/// (but the last), so every chunk starts on a step boundary counted from `lo`.
///
/// Claims go through one [`Claim`] per owning thread: how many units were taken from the
/// front of its run and how many from the back, packed in one atomic word.
#[derive(Clone, Copy, Debug)]
pub struct Shares {
    lo: usize,
    hi: usize,
    unit: usize,
    threads: usize,
    n_units: usize,
}

/// About this many units per thread (see [`Shares`]).
const UNITS_PER_THREAD: usize = 64;
/// The most units an owner takes at once: a quarter of what is left of its run, at least one.
const OWN_UNITS: usize = 4;

/// The units taken from one thread's run: front (by the owner) in the low half, back (by
/// others) in the high half. Reset to 0 before each step.
pub type Claim = std::sync::atomic::AtomicU64;

const HALF: u32 = 32;

impl Shares {
    pub fn new(lo: usize, hi: usize, threads: usize, step: usize) -> Shares {
        let (hi, threads, step) = (lo.max(hi), threads.max(1), step.max(1));
        let unit = (hi - lo)
            .div_ceil(threads * UNITS_PER_THREAD)
            .div_ceil(step)
            .max(1)
            * step;
        Shares {
            lo,
            hi,
            unit,
            threads,
            n_units: (hi - lo).div_ceil(unit),
        }
    }

    /// The unit indices `[a, b)` thread `k` (of the group) owns.
    fn run_of(&self, k: usize) -> (usize, usize) {
        split(self.n_units, k, self.threads)
    }

    /// The rows of units `[i, j)`.
    fn rows(&self, i: usize, j: usize) -> (usize, usize) {
        (
            self.lo + i * self.unit,
            self.hi.min(self.lo + j * self.unit),
        )
    }

    /// The next units of owner `k`'s run, taken from its front (`front`) or back, or `None`
    /// when the run is used up.
    fn take(&self, k: usize, claim: &Claim, front: bool) -> Option<(usize, usize)> {
        let (a, b) = self.run_of(k);
        let mut cur = claim.load(Ordering::Relaxed);
        loop {
            let (f, t) = ((cur & u64::from(u32::MAX)) as usize, (cur >> HALF) as usize);
            let left = (b - a).checked_sub(f + t).filter(|&l| l > 0)?;
            let take = if front {
                left.div_ceil(OWN_UNITS).min(OWN_UNITS)
            } else {
                1
            };
            let next = if front {
                cur + take as u64
            } else {
                cur + (1 << HALF)
            };
            match claim.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) if front => return Some(self.rows(a + f, a + f + take)),
                Ok(_) => return Some(self.rows(b - 1 - t, b - t)),
                Err(now) => cur = now,
            }
        }
    }

    /// The next chunk of thread `k`'s own run (front to back).
    #[inline]
    pub fn own(&self, k: usize, claim: &Claim) -> Option<(usize, usize)> {
        self.take(k, claim, true)
    }

    /// A unit from the back of thread `victim`'s run.
    #[inline]
    pub fn steal(&self, victim: usize, claim: &Claim) -> Option<(usize, usize)> {
        self.take(victim, claim, false)
    }
}

/// The contiguous share `[start, end)` of `n` items that thread `tid` of `nth` takes.
#[inline]
pub fn split(n: usize, tid: usize, nth: usize) -> (usize, usize) {
    let per = n / nth;
    let extra = n % nth;
    let start = tid * per + tid.min(extra);
    let len = per + usize::from(tid < extra);
    (start, start + len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_thread_runs_each_step_once() {
        let pool = Pool::new(3, |_| {});
        let hits = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
        for _ in 0..1000 {
            pool.run(&|tid| {
                hits[tid].fetch_add(1, Ordering::Relaxed);
            });
        }
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 1000);
        }
    }

    #[test]
    fn groups_number_threads_contiguously_and_all_run() {
        let pinned = Arc::new(Mutex::new(Vec::new()));
        let p2 = Arc::clone(&pinned);
        let pool = Pool::grouped(&[2, 1, 3], move |tid| p2.lock().unwrap().push(tid));
        assert_eq!(pool.threads(), 6);
        assert_eq!(pool.groups(), &[0..2, 2..3, 3..6]);
        assert_eq!(
            (0..6).map(|t| pool.group_of(t)).collect::<Vec<_>>(),
            vec![0, 0, 1, 2, 2, 2]
        );
        let hits: Vec<AtomicU64> = (0..6).map(|_| AtomicU64::new(0)).collect();
        for _ in 0..500 {
            pool.run(&|tid| {
                hits[tid].fetch_add(1, Ordering::Relaxed);
            });
        }
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 500));
        let mut p = pinned.lock().unwrap().clone();
        p.sort_unstable();
        assert_eq!(
            p,
            vec![0, 1, 2, 3, 4, 5],
            "the hook ran once on every thread"
        );
    }

    #[test]
    fn group_rows_are_the_union_of_their_threads_rows() {
        for rows in [0, 5, 64, 577] {
            for nth in 1..7 {
                for a in 0..nth {
                    for b in a + 1..=nth {
                        let (lo, hi) = rows_of_group(rows, &(a..b), nth);
                        assert_eq!(lo, rows_of_thread(rows, a, nth).0);
                        assert_eq!(hi, rows_of_thread(rows, b - 1, nth).1);
                    }
                }
            }
        }
    }

    #[test]
    fn workers_wake_after_sleeping() {
        let pool = Pool::new(3, |_| {});
        let count = AtomicU64::new(0);
        for _ in 0..3 {
            // Long enough for the workers to go to sleep on the condition variable.
            std::thread::sleep(std::time::Duration::from_millis(50));
            pool.run(&|_| {
                count.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert_eq!(count.load(Ordering::Relaxed), 9);
    }

    /// Takes every chunk of `sh` with `threads` threads: each its own run, then (with
    /// `steal`) from the others' backs; returns each thread's chunks in the order taken.
    fn take_all(sh: &Shares, threads: usize, own_first: usize) -> Vec<Vec<(usize, usize)>> {
        let claims: Vec<Claim> = (0..threads).map(|_| Claim::new(0)).collect();
        let mut got = vec![Vec::new(); threads];
        // Thread 0 takes `own_first` chunks of its own; then everyone else finishes their own
        // run; then thread 0 finds its run partly stolen.
        for _ in 0..own_first {
            if let Some(c) = sh.own(0, &claims[0]) {
                got[0].push(c);
            }
        }
        for k in 1..threads {
            while let Some(c) = sh.own(k, &claims[k]) {
                got[k].push(c);
            }
            for v in (0..threads).filter(|&v| v != k) {
                while let Some(c) = sh.steal(v, &claims[v]) {
                    got[k].push(c);
                }
            }
        }
        while let Some(c) = sh.own(0, &claims[0]) {
            got[0].push(c);
        }
        got
    }

    #[test]
    fn shares_cover_every_row_once_owners_in_order() {
        for (lo, rows) in [(0, 0), (0, 1), (16, 512), (0, 2048), (32, 5632), (7, 100)] {
            for threads in 1..5 {
                for step in [1, 16] {
                    let sh = Shares::new(lo, lo + rows, threads, step);
                    for own_first in [0, 1, 3, 1000] {
                        let got = take_all(&sh, threads, own_first);
                        let mut all: Vec<_> = got.iter().flatten().copied().collect();
                        all.sort_unstable();
                        let mut next = lo;
                        for &(a, b) in &all {
                            assert_eq!(a, next, "{rows} rows, {threads} threads: a gap or overlap");
                            assert!(b > a);
                            assert_eq!((a - lo) % step, 0, "chunk at {a} is off a step boundary");
                            next = b;
                        }
                        assert_eq!(
                            next,
                            lo + rows,
                            "{rows} rows, {threads} threads: all covered"
                        );
                        // The owner's own chunks come front to back, each where the last ended.
                        let own0: Vec<_> = got[0].clone();
                        for w in own0.windows(2) {
                            assert_eq!(w[0].1, w[1].0, "thread 0 jumped within its run");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_slow_thread_gets_its_run_stolen_and_the_tail_is_one_unit() {
        let sh = Shares::new(0, 2048, 2, 16);
        let got = take_all(&sh, 2, 1);
        // Thread 0 took four units (16 rows each) at first, thread 1 everything else.
        assert_eq!(got[0], vec![(0, 64)]);
        assert_eq!(got[1].iter().map(|(a, b)| b - a).sum::<usize>(), 2048 - 64);
        // Thread 1's own claims shrink to one unit at the end of its run.
        let own1: Vec<_> = got[1].iter().filter(|c| c.0 >= 1024).collect();
        assert!(own1.iter().all(|(a, b)| b - a <= 64));
        assert_eq!(own1.last().map(|(a, b)| b - a), Some(16));
        // What it stole from thread 0's back came one unit at a time.
        assert!(got[1]
            .iter()
            .filter(|c| c.0 < 1024)
            .all(|(a, b)| b - a == 16));
    }

    #[test]
    fn split_covers_everything_once() {
        for n in [0, 1, 7, 64, 1000] {
            for nth in 1..6 {
                let mut next = 0;
                for t in 0..nth {
                    let (a, b) = split(n, t, nth);
                    assert_eq!(a, next);
                    next = b;
                }
                assert_eq!(next, n);
            }
        }
    }

    /// A second `run` while one is in progress panics loudly (and leaves the first one and
    /// the pool intact), whether it comes from another thread or from inside a job; one-thread
    /// pools, which share nothing between threads, refuse it as well.
    #[test]
    fn a_second_concurrent_run_is_refused() {
        for n in [1, 3] {
            let pool = Pool::new(n, |_| {});
            let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
            let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
            let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
            let hits = AtomicU64::new(0);
            std::thread::scope(|scope| {
                let first = scope.spawn(|| {
                    pool.run(&|tid| {
                        hits.fetch_add(1, Ordering::Relaxed);
                        if tid == 0 {
                            entered_tx.lock().unwrap().send(()).unwrap();
                            release_rx.lock().unwrap().recv().unwrap();
                        }
                    })
                });
                entered_rx.recv().unwrap();
                let second = catch_unwind(AssertUnwindSafe(|| pool.run(&|_| {})));
                // Let the first run finish before judging, so a failure cannot hang the test.
                release_tx.send(()).unwrap();
                first.join().expect("the first run completes");
                let payload = second.expect_err("a concurrent run must panic");
                let msg = payload
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("");
                assert!(msg.contains("another run"), "{n} threads: {msg:?}");
            });
            assert_eq!(hits.load(Ordering::Relaxed), n as u64);
            // From inside a job (thread 0 runs jobs on the caller's thread).
            let nested = catch_unwind(AssertUnwindSafe(|| {
                pool.run(&|tid| {
                    if tid == 0 {
                        pool.run(&|_| {});
                    }
                })
            }));
            assert!(nested.is_err(), "{n} threads: a nested run must panic");
            // The pool still works afterwards.
            let count = AtomicU64::new(0);
            pool.run(&|_| {
                count.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(count.load(Ordering::Relaxed), n as u64);
        }
    }

    #[test]
    fn worker_panic_is_reported_not_hung() {
        let pool = Pool::new(2, |_| {});
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|tid| {
                if tid == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        // The pool still works afterwards.
        let count = AtomicU64::new(0);
        pool.run(&|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
