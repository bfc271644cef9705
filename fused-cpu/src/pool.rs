//! A persistent worker pool whose parallel regions cost well under a
//! microsecond when its workers are awake.
//!
//! A decode step is a chain of small kernels, each a parallel region that
//! ends in a barrier. A general-purpose pool (rayon) hands every region to
//! its workers through a queue and puts idle workers to sleep at once, so a
//! region costs several microseconds, more after a gap (see BENCHMARKS.md).
//! This pool keeps its workers spinning for [`SPIN`] after each region, so a
//! chain of regions pays only an atomic epoch bump and a join; idle longer
//! than that, they park and the next region pays one wake-up.
//!
//! [`WorkerPool::run`] runs `task(0..n_tasks)` on the calling thread and
//! the workers together, tasks taken one by one from a shared counter, and
//! returns when every task is done (the region's barrier). Which thread runs
//! a task varies; what a task computes must not depend on it. With one
//! thread, or one task, the tasks run inline on the caller: no barrier.

use std::boxed::Box;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use std::vec::Vec;

/// How long an idle worker spins before it parks.
pub const SPIN: Duration = Duration::from_micros(200);

/// The body of one region, with its lifetime erased (see [`WorkerPool::run`]).
type Job = *const (dyn Fn(usize) + Sync);

/// `Shared::state`: joined workers in the low bits, [`CLOSED`] once the
/// caller has run out of tasks, the region's epoch in the high 32 bits.
const COUNT_MASK: u64 = 0xffff;
/// Set in `Shared::state` when no worker may join the region any more.
const CLOSED: u64 = 1 << 16;

fn epoch_of(state: u64) -> u64 {
    state >> 32
}

/// State shared by the caller and the workers.
struct Shared {
    /// Epoch, closed flag and joined-worker count of the current region
    /// (see [`COUNT_MASK`]). A worker joins only an open region of an epoch
    /// it has not seen; the caller closes the region when every task has
    /// been handed out and waits only for the workers that joined. A worker
    /// that wakes late thus never delays a region it missed.
    state: AtomicU64,
    /// The current region's body; set before the region opens, cleared after
    /// it is closed and no worker is left in it.
    job: Mutex<Option<SendJob>>,
    /// Tasks of the current region.
    n_tasks: AtomicUsize,
    /// The next task to hand out.
    next: AtomicUsize,
    /// A task of the current region panicked; its payload is in `panic`.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// Workers parked on `wake`.
    sleeping: AtomicUsize,
    /// Guards parking; paired with `wake`.
    park: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
}

/// A [`Job`] that may cross threads.
#[derive(Clone, Copy)]
struct SendJob(Job);

// SAFETY: the pointee is `Sync` (`dyn Fn(usize) + Sync`), so calling it from
// several threads is allowed; the pointer itself is only dereferenced while
// `WorkerPool::run` keeps the closure alive (see there).
unsafe impl Send for SendJob {}

/// A fixed set of worker threads plus the calling thread.
pub struct WorkerPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// Serialises regions when the pool is shared between caller threads.
    region: Mutex<()>,
}

impl core::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl WorkerPool {
    /// A pool of `threads` threads in all: the caller of [`WorkerPool::run`]
    /// and `threads − 1` workers, named `{name}-{i}`. `threads` of 0 is
    /// taken as 1. Fails only if the OS refuses a thread.
    pub fn new(threads: usize, name: &str) -> std::io::Result<WorkerPool> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            job: Mutex::new(None),
            n_tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            panic: Mutex::new(None),
            sleeping: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let mut pool = WorkerPool {
            shared,
            workers: Vec::with_capacity(threads - 1),
            threads,
            region: Mutex::new(()),
        };
        for i in 1..threads {
            let shared = Arc::clone(&pool.shared);
            let handle = thread::Builder::new()
                .name(std::format!("{name}-{i}"))
                .spawn(move || worker(&shared))?;
            // On an early return `pool` is dropped, which stops the workers
            // spawned so far.
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Threads taking part in a region (the caller included).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `task(i)` for every `i < n_tasks` on the caller and the workers,
    /// returning when all are done. A panic in a task is re-raised here,
    /// after every task of the region has finished.
    pub fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        if self.threads == 1 || n_tasks <= 1 {
            (0..n_tasks).for_each(task);
            return;
        }
        let _region = self.region.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased. The pointer is published
        // below and dereferenced by a worker only after it joined the region
        // and before it leaves it; this function does not return (nor
        // unwind: the caller's own tasks run under `catch_unwind`) before the
        // region is closed, no worker is left in it, and the pointer is
        // cleared, so `task` outlives every use.
        let job: Job = unsafe {
            core::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), Job>(
                task as *const (dyn Fn(usize) + Sync),
            )
        };
        *s.job.lock().unwrap_or_else(PoisonError::into_inner) = Some(SendJob(job));
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        // The previous region is closed with no worker in it: open the next.
        let epoch = epoch_of(s.state.load(Ordering::SeqCst)) + 1;
        s.state.store(epoch << 32, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = s.park.lock().unwrap_or_else(PoisonError::into_inner);
            s.wake.notify_all();
        }
        take_tasks(s, task);
        // Every task is handed out: no more joins; wait for those inside.
        let mut state = s.state.fetch_or(CLOSED, Ordering::SeqCst) | CLOSED;
        let t0 = Instant::now();
        let mut spins = 0u32;
        while state & COUNT_MASK != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && t0.elapsed() > SPIN {
                thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
            state = s.state.load(Ordering::Acquire);
        }
        *s.job.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let payload = s
            .panic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(p) = payload {
            resume_unwind(p);
        }
    }
}

/// Takes tasks of the current region until none are left; a panicking task
/// is recorded (the first payload is kept) and the others still run.
fn take_tasks(s: &Shared, task: &(dyn Fn(usize) + Sync)) {
    let n = s.n_tasks.load(Ordering::Relaxed);
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return;
        }
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| task(i))) {
            let mut slot = s.panic.lock().unwrap_or_else(PoisonError::into_inner);
            slot.get_or_insert(p);
        }
    }
}

/// A worker: waits for a new epoch (spinning, then parked), joins the
/// region if it is still open, runs tasks, leaves.
fn worker(s: &Shared) {
    let mut seen = 0;
    loop {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if epoch_of(s.state.load(Ordering::SeqCst)) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && t0.elapsed() > SPIN {
                let mut g = s.park.lock().unwrap_or_else(PoisonError::into_inner);
                s.sleeping.fetch_add(1, Ordering::SeqCst);
                while epoch_of(s.state.load(Ordering::SeqCst)) == seen
                    && !s.shutdown.load(Ordering::SeqCst)
                {
                    g = s.wake.wait(g).unwrap_or_else(PoisonError::into_inner);
                }
                s.sleeping.fetch_sub(1, Ordering::SeqCst);
                break;
            }
            core::hint::spin_loop();
        }
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        let mut state = s.state.load(Ordering::SeqCst);
        seen = epoch_of(state);
        let joined = loop {
            if epoch_of(state) != seen || state & CLOSED != 0 {
                break false;
            }
            match s.state.compare_exchange_weak(
                state,
                state + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break true,
                Err(now) => state = now,
            }
        };
        if !joined {
            continue;
        }
        let job = *s.job.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(SendJob(job)) = job {
            // SAFETY: this worker joined the open region of epoch `seen`,
            // whose pointer `run` set before opening it; `run` keeps the
            // closure alive until the joined count, which includes this
            // worker until the `fetch_sub` below, is back to zero.
            let task = unsafe { &*job };
            take_tasks(s, task);
        }
        s.state.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self
                .shared
                .park
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.shared.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_exactly_once() {
        for threads in [1, 2, 3] {
            let pool = WorkerPool::new(threads, "t").unwrap();
            for n in [0usize, 1, 2, 7, 64] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                pool.run(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn regions_after_a_park_still_run() {
        let pool = WorkerPool::new(2, "t").unwrap();
        let sum = AtomicUsize::new(0);
        pool.run(4, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        thread::sleep(SPIN * 3);
        pool.run(4, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 12);
    }

    #[test]
    fn a_panicking_task_is_reraised_after_the_region() {
        let pool = WorkerPool::new(2, "t").unwrap();
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(8, &|i| {
                if i == 3 {
                    panic!("task 3");
                }
                done.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::Relaxed), 7);
        // The pool still works.
        let again = AtomicUsize::new(0);
        pool.run(5, &|_| {
            again.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(again.load(Ordering::Relaxed), 5);
    }
}
