//! Keeps a CUDA graph's stream capture apart from the other driver work of
//! the process.
//!
//! Every backend of a process shares device 0's primary context, and a
//! stream capture in that context is invalidated when another thread asks
//! the context for work the capture cannot record or order against
//! (an allocation, a free, a synchronous copy, a module load, a
//! synchronize); the other thread's call fails too. So a capture holds this
//! lock exclusively ([`capture`]) and everything else the crate asks of the
//! driver holds it shared ([`shared`]): captures wait for the calls in
//! flight and the calls wait for a capture, while calls on different
//! threads still run side by side.
//!
//! The lock is re-entrant per thread: a thread that holds it (shared or
//! exclusively) takes it again for free, so that a capture's own launches
//! and a free inside a synchronising call do not wait for themselves.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::CudaError;

static CONTEXT: RwLock<()> = RwLock::new(());

/// What the calling thread holds of [`CONTEXT`], and how many live
/// [`ContextUse`] tokens share it.
enum Held {
    Nothing,
    Shared {
        _guard: RwLockReadGuard<'static, ()>,
        uses: usize,
    },
    Exclusive {
        _guard: RwLockWriteGuard<'static, ()>,
        uses: usize,
    },
}

thread_local! {
    static HELD: RefCell<Held> = const { RefCell::new(Held::Nothing) };
}

/// The calling thread's hold on the context lock, released when the last
/// token of the thread is dropped. Not `Send`: the hold belongs to the
/// thread that took it.
#[must_use = "the lock is released when the token is dropped"]
pub(crate) struct ContextUse {
    _thread_bound: PhantomData<*const ()>,
}

/// Takes the context lock shared (or counts one more use of the calling
/// thread's hold), waiting while another thread captures.
pub(crate) fn shared() -> ContextUse {
    HELD.with_borrow_mut(|held| match held {
        Held::Nothing => {
            let guard = CONTEXT.read().unwrap_or_else(PoisonError::into_inner);
            *held = Held::Shared {
                _guard: guard,
                uses: 1,
            };
        }
        Held::Shared { uses, .. } | Held::Exclusive { uses, .. } => *uses += 1,
    });
    ContextUse {
        _thread_bound: PhantomData,
    }
}

/// Takes the context lock exclusively for a stream capture, waiting for
/// every other thread's driver calls in flight. A thread that already
/// holds the lock shared cannot upgrade it (two such threads would wait for
/// each other), so that is refused.
pub(crate) fn capture() -> Result<ContextUse, CudaError> {
    HELD.with_borrow_mut(|held| match held {
        Held::Nothing => {
            let guard = CONTEXT.write().unwrap_or_else(PoisonError::into_inner);
            *held = Held::Exclusive {
                _guard: guard,
                uses: 1,
            };
            Ok(())
        }
        Held::Exclusive { uses, .. } => {
            *uses += 1;
            Ok(())
        }
        Held::Shared { .. } => Err(CudaError::Driver {
            what: "begin a stream capture",
            message: "the calling thread is inside another driver call of the backend".into(),
        }),
    })?;
    Ok(ContextUse {
        _thread_bound: PhantomData,
    })
}

impl Drop for ContextUse {
    fn drop(&mut self) {
        HELD.with_borrow_mut(|held| {
            let last = match held {
                Held::Shared { uses, .. } | Held::Exclusive { uses, .. } => {
                    *uses -= 1;
                    *uses == 0
                }
                // A token exists only while its thread holds the lock.
                Held::Nothing => false,
            };
            if last {
                *held = Held::Nothing;
            }
        });
    }
}

/// A driver resource (device memory) released under the context lock, so
/// that dropping it waits for a capture elsewhere instead of breaking it.
pub(crate) struct LockedDrop<T>(ManuallyDrop<T>);

impl<T> LockedDrop<T> {
    /// Wraps `resource`.
    pub(crate) fn new(resource: T) -> LockedDrop<T> {
        LockedDrop(ManuallyDrop::new(resource))
    }
}

impl<T> Deref for LockedDrop<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for LockedDrop<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> Drop for LockedDrop<T> {
    fn drop(&mut self) {
        let _use = shared();
        // SAFETY: the resource is dropped exactly once, here; `self` is not
        // used after its drop.
        unsafe { ManuallyDrop::drop(&mut self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    use std::thread;
    use std::time::Duration;

    fn holds() -> &'static str {
        HELD.with_borrow(|h| match h {
            Held::Nothing => "nothing",
            Held::Shared { .. } => "shared",
            Held::Exclusive { .. } => "exclusive",
        })
    }

    #[test]
    fn a_thread_takes_its_own_hold_again_and_releases_it_with_the_last_token() {
        let a = shared();
        let b = shared();
        drop(a);
        assert_eq!(holds(), "shared");
        drop(b);
        assert_eq!(holds(), "nothing");
        let c = capture().unwrap();
        let d = shared();
        drop(c);
        assert_eq!(holds(), "exclusive");
        drop(d);
        assert_eq!(holds(), "nothing");
    }

    #[test]
    fn a_locked_drop_releases_its_resource_under_the_lock() {
        struct SeesTheLock;
        impl Drop for SeesTheLock {
            fn drop(&mut self) {
                assert_eq!(holds(), "shared");
            }
        }
        drop(LockedDrop::new(SeesTheLock));
        assert_eq!(holds(), "nothing");
    }

    #[test]
    fn a_shared_holder_cannot_begin_a_capture() {
        let _use = shared();
        assert!(capture().is_err());
    }

    #[test]
    fn a_capture_waits_for_a_shared_hold_of_another_thread() {
        let started = Arc::new(Barrier::new(2));
        let captured = Arc::new(AtomicBool::new(false));
        let user = shared();
        let t = {
            let (started, captured) = (started.clone(), captured.clone());
            thread::spawn(move || {
                started.wait();
                let _c = capture().unwrap();
                captured.store(true, Ordering::SeqCst);
            })
        };
        started.wait();
        thread::sleep(Duration::from_millis(50));
        assert!(!captured.load(Ordering::SeqCst));
        drop(user);
        t.join().unwrap();
        assert!(captured.load(Ordering::SeqCst));
    }
}
