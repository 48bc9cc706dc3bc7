//! A fixed pool of worker threads that all run the same job, each with its own index.
//!
//! The forward pass is a sequence of short parallel steps (a matrix-vector product, attention
//! over heads). Each step is `pool.run(&|tid| ...)`: the caller becomes thread 0, workers
//! 1..n run the closure with their index, and `run` returns when every thread is done. Workers
//! spin briefly between steps (steps are microseconds apart during decode), then yield, then
//! sleep on a condition variable so an idle engine burns no CPU.
//!
//! No allocation or lock happens on the per-step path while workers are spinning.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Spins before a waiting worker starts yielding its CPU.
const SPIN_ITERS: u32 = 1 << 14;
/// Yields before a waiting worker goes to sleep.
const YIELD_ITERS: u32 = 1 << 8;

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Bumped once per step; workers run the job when they see a new value.
    generation: AtomicUsize,
    /// The current job. Written by `run` before `generation` is bumped (Release), read by
    /// workers after they observe the bump (Acquire).
    job: Mutex<Option<JobPtr>>,
    /// Workers still running the current step.
    remaining: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

#[derive(Clone, Copy)]
struct JobPtr(*const Job);
// SAFETY: the pointee is `Sync` (Job: Sync) and `run` keeps it alive until every worker is done.
unsafe impl Send for JobPtr {}

/// A pool of `n` threads (the caller counts as one).
pub struct Pool {
    n: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool of `n` threads in all (`n - 1` workers plus the caller). `hook(i)` runs first on
    /// each worker thread `i` (used to pin threads); it is not run for the caller.
    pub fn new(n: usize, hook: impl Fn(usize) + Send + Sync + 'static) -> Pool {
        let n = n.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            job: Mutex::new(None),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let hook = Arc::new(hook);
        let workers = (1..n)
            .map(|tid| {
                let shared = Arc::clone(&shared);
                let hook = Arc::clone(&hook);
                std::thread::Builder::new()
                    .name(format!("locus-{tid}"))
                    .spawn(move || {
                        hook(tid);
                        worker(tid, &shared)
                    })
                    .expect("cannot spawn a worker thread")
            })
            .collect();
        Pool { n, shared, workers }
    }

    pub fn threads(&self) -> usize {
        self.n
    }

    /// Runs `f(tid)` on every thread, `tid` in `0..threads()`, and returns when all are done.
    pub fn run<F: Fn(usize) + Sync>(&self, f: &F) {
        if self.n == 1 {
            f(0);
            return;
        }
        let s = &*self.shared;
        let job: &(dyn Fn(usize) + Sync + '_) = f;
        // SAFETY: the lifetime is erased only for the duration of this call: `run` does not
        // return until `remaining` is zero, i.e. every worker has finished calling the job.
        let ptr: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(JobPtr(ptr));
        s.remaining.store(self.n - 1, Ordering::Release);
        s.generation.fetch_add(1, Ordering::AcqRel);
        {
            let _g = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        while s.remaining.load(Ordering::Acquire) != 0 {
            spins = backoff(spins);
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::AcqRel) {
            panic!("a worker thread panicked during a parallel step");
        }
    }
}

fn backoff(spins: u32) -> u32 {
    if spins < SPIN_ITERS {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    spins.saturating_add(1)
}

fn worker(tid: usize, s: &Shared) {
    let mut seen = 0usize;
    loop {
        let mut spins = 0u32;
        loop {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if spins < SPIN_ITERS + YIELD_ITERS {
                spins = backoff(spins);
            } else {
                let guard = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
                if s.generation.load(Ordering::Acquire) == seen && !s.stop.load(Ordering::Acquire) {
                    drop(s.wake.wait(guard));
                }
            }
        }
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(JobPtr(p)) = job {
            // SAFETY: `run` published this pointer before bumping the generation we observed
            // and keeps the closure alive until we decrement `remaining` below.
            let f = unsafe { &*p };
            if catch_unwind(AssertUnwindSafe(|| f(tid))).is_err() {
                s.panicked.store(true, Ordering::Release);
            }
        }
        s.remaining.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
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
