//! CUDA graphs by stream capture: the launches a closure enqueues on the
//! backend's stream are recorded into a graph (`cuStreamBeginCapture` /
//! `cuStreamEndCapture`), instantiated once (`cuGraphInstantiateWithFlags`)
//! and replayed with one `cuGraphLaunch`. cust 0.3.2 wraps none of these
//! calls, so they go through its raw bindings (`cust::sys`); the libcuda
//! stub of `scripts/gen-libcuda-stub` exports them like every function of
//! `cuda.h`.

use std::ptr;

use cust::sys::{
    CUgraph, CUgraphExec, CUstreamCaptureMode, cuGraphDestroy, cuGraphExecDestroy,
    cuGraphInstantiateWithFlags, cuGraphLaunch, cuStreamBeginCapture_v2, cuStreamEndCapture,
};

use crate::backend::CudaBackend;
use crate::context_lock;
use crate::device::check_result;
use crate::error::CudaError;

/// An instantiated CUDA graph and the graph it was made from; both are
/// destroyed on drop.
#[derive(Debug)]
pub(crate) struct CapturedGraph {
    graph: CUgraph,
    exec: CUgraphExec,
}

impl CapturedGraph {
    /// Captures what `enqueue` enqueues on `backend`'s stream (which must
    /// have nothing pending) into a graph and instantiates it. Nothing runs
    /// during capture. The device addresses the captured launches use must
    /// stay valid for as long as the graph is launched.
    pub(crate) fn capture(
        backend: &CudaBackend,
        enqueue: impl FnOnce() -> Result<(), CudaError>,
    ) -> Result<CapturedGraph, CudaError> {
        // No other thread asks the context for anything while capturing.
        let _alone = context_lock::capture()?;
        let dev = backend.dev();
        let _use = dev.make_current()?;
        let stream = dev.stream.as_inner();
        // Relaxed: the launches look up kernel functions while capturing,
        // which the stricter modes would refuse as potentially unsafe.
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `stream` is the backend's live stream (a non-default
        // stream, as capture requires); the capture ends below on every path.
        let begun = unsafe { cuStreamBeginCapture_v2(stream, mode) };
        check_result(begun, "begin a stream capture")?;
        let enqueued = enqueue();
        let mut graph: CUgraph = ptr::null_mut();
        // SAFETY: ends the capture begun above on the same stream; `graph`
        // is a valid out-pointer.
        let ended = unsafe { cuStreamEndCapture(stream, &mut graph) };
        let ended = check_result(ended, "end a stream capture");
        // Owns `graph` from here on, so that every error path destroys it.
        let mut captured = CapturedGraph {
            graph,
            exec: ptr::null_mut(),
        };
        enqueued?;
        ended?;
        if captured.graph.is_null() {
            return Err(CudaError::Driver {
                what: "end a stream capture",
                message: "no graph was captured".into(),
            });
        }
        // SAFETY: `graph` is the graph just captured; `exec` is a valid
        // out-pointer; flags 0 ask for nothing special.
        let made = unsafe { cuGraphInstantiateWithFlags(&mut captured.exec, captured.graph, 0) };
        check_result(made, "instantiate a CUDA graph")?;
        Ok(captured)
    }

    /// Enqueues one replay of the graph on `backend`'s stream (nothing waits
    /// for it) and counts it as one launch.
    pub(crate) fn launch(&self, backend: &CudaBackend) -> Result<(), CudaError> {
        let dev = backend.dev();
        let _use = dev.make_current()?;
        // SAFETY: `exec` is an instantiated graph (capture succeeded), the
        // stream is live; the graph's launches point into buffers that the
        // owner of this graph keeps alive while it exists (and waits for
        // before freeing them).
        let launched = unsafe { cuGraphLaunch(self.exec, dev.stream.as_inner()) };
        check_result(launched, "launch a CUDA graph")?;
        backend.count_launch();
        Ok(())
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        let _use = context_lock::shared();
        // SAFETY: both handles are owned by this value (or null) and
        // destroyed once; a replay still running keeps its own reference
        // (the driver defers the release until it completes), and the
        // owner waits for the stream before dropping anyway.
        unsafe {
            if !self.exec.is_null() {
                let _ = cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = cuGraphDestroy(self.graph);
            }
        }
    }
}
