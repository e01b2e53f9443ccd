//! commtune: a preload library that sees MPI collectives and halo exchanges of unmodified
//! applications through the MPI profiling interface, measures them per call site, tunes the
//! repeating collectives online and reports where communication time goes (see ARCHITECTURE.md
//! and LD_PRELOAD.md).
//!
//! Data flows down once: `shim/` (C entry points) → `interpose` (classify, key, dispatch) →
//! `tuner` (which codelet runs each call) → `codelets` (the algorithms) → `mpi` (the only raw
//! MPI calls). `keys` holds each call site's measurements, `halo` groups point-to-point calls
//! into episodes, `site` names callers, `report` gathers and writes at MPI_Finalize, `config`
//! reads the knobs once at load time, `clock` gives cheap timestamps.

mod clock;
mod codelets;
mod comms;
mod config;
mod halo;
mod interpose;
mod keys;
mod mpi;
mod report;
mod runtime;
mod say;
mod site;
mod sync;
mod tuner;
