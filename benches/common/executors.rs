//! The executors a user may bring, shared by the wall-clock benches that compare shapes on
//! each of them (`map.rs`, `consume.rs`): `smol` (`smol::block_on`), `futures-executor`
//! (`futures::executor::block_on`), `run_sync` (tollgate's own), `tokio-current` and
//! `tokio-multi` (`Runtime::block_on` on a current-thread runtime and on a 2-worker
//! multi-thread runtime).

use std::future::Future;

/// An executor a user may bring, and a way to run a future to completion on it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Executor {
    Smol,
    Futures,
    RunSync,
    TokioCurrent,
    TokioMulti,
}

impl Executor {
    pub const ALL: [Executor; 5] = [
        Executor::Smol,
        Executor::Futures,
        Executor::RunSync,
        Executor::TokioCurrent,
        Executor::TokioMulti,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Executor::Smol => "smol",
            Executor::Futures => "futures-executor",
            Executor::RunSync => "run_sync",
            Executor::TokioCurrent => "tokio-current",
            Executor::TokioMulti => "tokio-multi",
        }
    }
}

/// The executors, built once per workload and reused by every row.
pub struct Executors {
    current: tokio::runtime::Runtime,
    multi: tokio::runtime::Runtime,
}

impl Executors {
    pub fn new() -> Self {
        Self {
            current: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            multi: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    pub fn block_on<F: Future>(&self, executor: Executor, future: F) -> F::Output {
        match executor {
            Executor::Smol => smol::block_on(future),
            Executor::Futures => futures::executor::block_on(future),
            Executor::RunSync => tollgate::run_sync(future),
            Executor::TokioCurrent => self.current.block_on(future),
            Executor::TokioMulti => self.multi.block_on(future),
        }
    }
}
