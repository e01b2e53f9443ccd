//! The pure part of commtune's tuning: everything that decides without talking to MPI, so that it
//! can be tested (and replayed) on its own. The library feeds it numbers that every rank has alike
//! and gets the same decisions back on every rank.
//!
//! - `stats`: estimators of a codelet's typical time from one rank's samples.
//! - `policy`: search policies (which codelets stay in the race after a round, when to decide).
//! - `settings`: the tuner's knobs as values, and how samples are timed.
//! - `budget`: do no harm, whether a key's search can pay for itself.
//! - `checkpoints`: when a communicator's next checkpoint comes.
//! - `classes`: size classes, so that calls of slightly different sizes share a search.
//! - `check`: the self-check of a decision against the winner's realised time.
//! - `trial`: a codelet on trial in production, between windows of the winner's.
//! - `sampling`: what a search sample is (blocks of instances) and the order of a search.
//! - `attributes`: what a codelet is like (its partners, whether it uses MPI collectives).
//! - `schedule`: who exchanges which blocks with whom in the collective algorithms.
//! - `edges`: which graph edge carries each message of a halo episode run as one neighbourhood
//!   collective.
//! - `report`, `timeline`: the report's view of a key's tuning and of what it ran when, built the
//!   same way for every tuner.
//! - `trace`, `simulate`: the traces COMMTUNE_TRACE writes, and a replay of a tuned run from them
//!   under any settings (decision, instances searched, regret against the best codelet).

pub mod attributes;
pub mod budget;
pub mod check;
pub mod checkpoints;
pub mod classes;
pub mod edges;
pub mod policy;
pub mod report;
pub mod sampling;
pub mod schedule;
pub mod settings;
pub mod simulate;
pub mod stats;
pub mod timeline;
pub mod trace;
pub mod trial;

pub use attributes::{Attributes, Partners};
pub use policy::{Agreed, Candidate, Next, Plan, Search};
pub use settings::{Settings, Timing};
pub use stats::Filter;
