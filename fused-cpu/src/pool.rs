//! A persistent worker pool whose parallel regions cost well under a
//! microsecond when its workers are awake.
//!
//! A decode step is a chain of small kernels, each a parallel region that
//! ends in a barrier. A general-purpose pool (rayon) hands every region to
//! its workers through a queue and puts idle workers to sleep at once, so a
//! region costs several microseconds, more after a gap (see BENCHMARKS.md).
//! This pool keeps its workers spinning for [`SPIN`] after each region, so a
//! chain of regions pays only an atomic epoch bump and a join; idle longer
//! than that, they park and are woken by the next region.
//!
//! [`WorkerPool::run`] runs `task(0..n_tasks)` on the calling thread and
//! the workers together, tasks claimed one by one, and returns when every
//! task is done (the region's barrier). The caller never waits for a worker
//! that has not claimed a task: one that wakes late (parked, or descheduled
//! on a busy machine) finds the tasks taken and the region is not delayed. Which thread runs
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

/// Bits of `Shared::state` per field: `epoch << 32 | n_tasks << 16 | next`.
const FIELD_BITS: u32 = 16;
const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;
/// Most tasks in one region; [`WorkerPool::run`] splits larger counts.
const MAX_TASKS: usize = FIELD_MASK as usize;

std::thread_local! {
    /// Whether this thread is running a task of some pool's region: a
    /// [`WorkerPool::run`] from inside one runs inline, since waiting for
    /// the pool (its region lock, its workers) from one of its own tasks
    /// would never end.
    static IN_TASK: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

fn epoch_of(state: u64) -> u64 {
    state >> 32
}

/// State shared by the caller and the workers.
struct Shared {
    /// The current region's epoch, task count and next unclaimed task, in
    /// one word so that a task is claimed with one compare-and-swap that also
    /// checks the region is still the one the claimer saw: a worker that
    /// wakes late can claim nothing of a region that is over, and finds no
    /// task left in one whose tasks are all claimed, so the caller only ever
    /// waits for tasks that are running.
    state: AtomicU64,
    /// The current region's body; set before the region opens, cleared after
    /// all its tasks are done.
    job: Mutex<Option<SendJob>>,
    /// Tasks of the current region finished.
    done: AtomicUsize,
    /// A task of the current region panicked; its payload is in `panic`.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// Workers parked on `wake`.
    sleeping: AtomicUsize,
    /// Guards parking; paired with `wake`.
    park: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
}

impl Shared {
    /// Claims the next task of the region of `epoch`, if that region is
    /// still current and has one left.
    fn claim(&self, epoch: u64) -> Option<usize> {
        let mut state = self.state.load(Ordering::SeqCst);
        loop {
            let (n, next) = ((state >> FIELD_BITS) & FIELD_MASK, state & FIELD_MASK);
            if epoch_of(state) != epoch || next >= n {
                return None;
            }
            match self.state.compare_exchange_weak(
                state,
                state + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(next as usize),
                Err(now) => state = now,
            }
        }
    }

    /// Claims and runs tasks of the region of `epoch` until none are left.
    ///
    /// # Safety
    /// `job` is the body of the region of `epoch`, alive until every task
    /// of that region is marked done.
    unsafe fn take_tasks(&self, epoch: u64, job: Job) {
        while let Some(i) = self.claim(epoch) {
            // SAFETY: task `i` of the region of `epoch` is claimed and not
            // yet done, so the caller's guarantee holds for this call.
            unsafe { self.run_claimed(job, i) };
        }
    }

    /// Runs claimed task `i` of the region whose body is `job` and marks it
    /// done; a panic is recorded (the first payload is kept) and the task
    /// still counts as done. No reference to the body outlives the call of
    /// the task: once the task is marked done, `run` may free the body.
    ///
    /// # Safety
    /// Task `i` of `job`'s region is claimed by this thread and not done.
    unsafe fn run_claimed(&self, job: Job, i: usize) {
        let outcome = {
            // SAFETY: `run` keeps the body alive until every task of the
            // region is done, and task `i` is not done before the increment
            // below, after this reference is gone.
            let task = unsafe { &*job };
            let outer = IN_TASK.replace(true);
            let outcome = catch_unwind(AssertUnwindSafe(|| task(i)));
            IN_TASK.set(outer);
            outcome
        };
        if let Err(p) = outcome {
            let mut slot = self.panic.lock().unwrap_or_else(PoisonError::into_inner);
            slot.get_or_insert(p);
        }
        self.done.fetch_add(1, Ordering::Release);
    }
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
            state: AtomicU64::new(0),
            job: Mutex::new(None),
            done: AtomicUsize::new(0),
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
    /// after every task of the region has finished. Called from inside a
    /// task of a region (of this pool or another), the tasks run inline on
    /// the calling thread, in order.
    pub fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        if self.threads == 1 || n_tasks <= 1 || IN_TASK.get() {
            (0..n_tasks).for_each(task);
            return;
        }
        let _region = self.region.lock().unwrap_or_else(PoisonError::into_inner);
        for first in (0..n_tasks).step_by(MAX_TASKS) {
            let n = (n_tasks - first).min(MAX_TASKS);
            self.region(n, &|i| task(first + i));
        }
    }

    /// One region of `n ≤ MAX_TASKS` tasks; the caller holds `self.region`.
    fn region(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased. The pointer is published
        // below and dereferenced only by a thread that claimed a task of this
        // region, before it marks that task done; this function does not
        // return (nor unwind: tasks run under `catch_unwind`) before every
        // task is done and the pointer is cleared, and after that no task of
        // this region can be claimed (the epoch moves on or nothing is left),
        // so `task` outlives every use.
        let job: Job = unsafe {
            core::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), Job>(
                task as *const (dyn Fn(usize) + Sync),
            )
        };
        *s.job.lock().unwrap_or_else(PoisonError::into_inner) = Some(SendJob(job));
        s.done.store(0, Ordering::SeqCst);
        let epoch = epoch_of(s.state.load(Ordering::SeqCst)) + 1;
        s.state
            .store(epoch << 32 | (n as u64) << FIELD_BITS, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = s.park.lock().unwrap_or_else(PoisonError::into_inner);
            s.wake.notify_all();
        }
        // SAFETY: `job` points at `task`, which lives until this function
        // returns, after every task of the region is done (below).
        unsafe { s.take_tasks(epoch, job) };
        // Every task is claimed; wait for those still running elsewhere.
        spin_for(|| (s.done.load(Ordering::Acquire) == n).then_some(()));
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

/// Waits until `ready()` gives a value, for work another thread of the
/// region is running: spinning for [`SPIN`], then yielding the core between
/// checks (that thread may be descheduled on a busy machine).
pub(crate) fn spin_for<T>(mut ready: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = ready() {
            return v;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && t0.elapsed() > SPIN {
            thread::yield_now();
        } else {
            core::hint::spin_loop();
        }
    }
}

/// A worker: waits for a new epoch (spinning, then parked), then runs the
/// tasks of that region it manages to claim.
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
        seen = epoch_of(s.state.load(Ordering::SeqCst));
        let Some(i) = s.claim(seen) else { continue };
        let job = *s.job.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(SendJob(job)) = job else {
            // Unreachable: a claimed task keeps its region's job published.
            s.done.fetch_add(1, Ordering::Release);
            continue;
        };
        // SAFETY: this thread claimed task `i` of the region of epoch
        // `seen`, whose body `run` published before opening the region and
        // keeps alive until every task of it is done; `take_tasks` claims
        // further tasks of the same region before running them.
        unsafe {
            s.run_claimed(job, i);
            s.take_tasks(seen, job);
        }
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
    #[cfg_attr(
        miri,
        ignore = "65 538 tasks: too slow under Miri; the region logic is the same"
    )]
    fn more_tasks_than_one_region_holds() {
        let pool = WorkerPool::new(2, "t").unwrap();
        let n = MAX_TASKS + 3;
        let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
        pool.run(n, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
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
    fn a_run_inside_a_task_runs_inline() {
        let pool = WorkerPool::new(4, "nested").unwrap();
        let other = WorkerPool::new(2, "other").unwrap();
        let hits: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
        pool.run(8, &|i| {
            pool.run(4, &|j| {
                hits[i * 8 + j].fetch_add(1, Ordering::Relaxed);
            });
            other.run(4, &|j| {
                hits[i * 8 + 4 + j].fetch_add(1, Ordering::Relaxed);
            });
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        // The flag is cleared after the region: the next run is parallel
        // again and still runs every task.
        let after = AtomicUsize::new(0);
        pool.run(16, &|_| {
            after.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(after.load(Ordering::Relaxed), 16);
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
