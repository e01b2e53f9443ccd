//! Halo exchanges from several threads (tests/programs/halo_threads.c): four threads per rank,
//! each on its own communicator, exchange seeded random patterns that repeat long enough to be
//! tuned and then change, completed by Waitall, Waitany loops, Testsome polling, single Waits, or
//! by another thread. Under every forced halo codelet and under tuning, at MPI_THREAD_MULTIPLE
//! (threads at once) and MPI_THREAD_SERIALIZED (threads in turn), the program finds every
//! received element, every receive status and every completed handle (MPI_REQUEST_NULL) right.
//!
//! CI runs seed 1; `HALO_THREADS_SEEDS=20 cargo test --release --test halo_threads` runs seeds
//! 1 to 20.

mod common;

use std::path::Path;

use common::{Flavour, Mpich, OpenMpi, compile, run, scratch, sites};
use serde_json::Value;

/// The halo codelets (`commtune codelets`), native first.
const CODELETS: &[&str] = &[
    "native",
    "persistent",
    "irecv_first",
    "pack",
    "pairwise",
    "neighbor",
];

const THREADS: &str = "4";
/// Iterations per thread, and per pattern: each pattern runs long enough to be tuned.
const ITERATIONS: &str = "320";
const PHASE: &str = "40";

fn seeds() -> u64 {
    std::env::var("HALO_THREADS_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Episodes each codelet ran, over every halo site of the report.
fn codelet_episodes(report: &Value, codelet: &str) -> u64 {
    sites(report)
        .iter()
        .filter(|s| s["op"] == "halo")
        .filter_map(|s| s["codelets"][codelet].as_u64())
        .sum()
}

fn threaded_halos(flavour: Flavour, np: usize, level: &str) {
    let dir = scratch(&format!("halo-threads-{level}-{}", flavour.name()));
    let program = compile(flavour, "halo_threads.c", &dir);
    for seed in 1..=seeds() {
        let seed = seed.to_string();
        let args = [level, &seed, THREADS, ITERATIONS, PHASE];
        // Forced codelets, default tuning, tuning with neighbor tried.
        let variants = CODELETS
            .iter()
            .map(|c| ("COMMTUNE_FORCE", format!("halo={c}")))
            .chain([
                ("COMMTUNE_HALO_NEIGHBOR", "off".to_string()),
                ("COMMTUNE_HALO_NEIGHBOR", "on".to_string()),
            ]);
        for (knob, value) in variants {
            let job = run(flavour, np, &program, &dir)
                .args(&args)
                .env("COMMTUNE_MODE", "tune")
                .env(knob, &value)
                .go();
            let context = format!("{flavour:?} {np} ranks, {args:?}, {knob}={value}");
            assert!(
                job.output.status.success()
                    && job.stdout().contains("halo_threads: results correct"),
                "{context}:\n{}\n{}",
                job.stdout(),
                job.stderr()
            );
            let report = job.report();
            if let Some(codelet) = value.strip_prefix("halo=") {
                // Every codelet applies to some of the patterns (strided datatypes for pack);
                // ranks agree on neighbor only when they meet at the same episodes, which
                // threads taking turns guarantee, and never where threads may call MPI at once.
                let runs = codelet != "neighbor" || level == "serialized";
                let ran = codelet_episodes(&report, codelet);
                assert_eq!(
                    ran > 0,
                    runs,
                    "{context}: {ran} episodes ran {codelet}: {report:#}"
                );
            } else {
                let searched: u64 = sites(&report)
                    .iter()
                    .filter(|s| s["op"] == "halo")
                    .filter_map(|s| s["tuning"]["search_instances"].as_u64())
                    .sum();
                assert!(searched > 0, "{context}: nothing was tuned: {report:#}");
            }
        }
    }
}

/// One thread at MPI_THREAD_MULTIPLE (`halo_threads multiple SEED 1 ...`), `neighbor` forced:
/// the ranks would agree on its repeating exchanges as they do in turn, but at that level another
/// thread could begin or complete an instance of the episode while they agree, so every rank
/// proposes nothing and the report says why.
fn neighbor_is_never_agreed_where_threads_may_call_mpi_at_once(flavour: Flavour, np: usize) {
    let dir = scratch(&format!("halo-threads-agreement-{}", flavour.name()));
    let program = compile(flavour, "halo_threads.c", &dir);
    for (level, agreed) in [("serialized", true), ("multiple", false)] {
        let job = run(flavour, np, &program, &dir)
            .args(&[level, "1", "1", ITERATIONS, PHASE])
            .env("COMMTUNE_MODE", "tune")
            .env("COMMTUNE_FORCE", "halo=neighbor")
            .go();
        assert!(
            job.output.status.success() && job.stdout().contains("halo_threads: results correct"),
            "{level}:\n{}\n{}",
            job.stdout(),
            job.stderr()
        );
        let report = job.report();
        let ran = codelet_episodes(&report, "neighbor");
        assert_eq!(ran > 0, agreed, "{level}: neighbor ran {ran}: {report:#}");
        if !agreed {
            assert!(
                report
                    .to_string()
                    .contains("a rank runs with MPI_THREAD_MULTIPLE"),
                "{level}: the report says why: {report:#}"
            );
        }
    }
}

#[test]
fn neighbor_is_never_agreed_where_threads_may_call_mpi_at_once_openmpi() {
    neighbor_is_never_agreed_where_threads_may_call_mpi_at_once(OpenMpi, 3);
}

#[test]
fn neighbor_is_never_agreed_where_threads_may_call_mpi_at_once_mpich() {
    neighbor_is_never_agreed_where_threads_may_call_mpi_at_once(Mpich, 2);
}

#[test]
fn threads_at_once_openmpi() {
    threaded_halos(OpenMpi, 3, "multiple");
}

#[test]
fn threads_in_turn_openmpi() {
    threaded_halos(OpenMpi, 3, "serialized");
}

#[test]
fn threads_at_once_mpich() {
    threaded_halos(Mpich, 2, "multiple");
}

#[test]
fn threads_in_turn_mpich() {
    threaded_halos(Mpich, 2, "serialized");
}

/// A halo exchange posted by the main thread and completed by another, which calls MPI_Waitall
/// while the main thread waits for it (tests/programs/threads_handover.c, MPI_THREAD_SERIALIZED).
/// With `neighbor` forced the ranks agree on the exchange from the instances the main thread
/// completes; an instance held for the collective then waited for the next MPI call of the
/// thread that posted it, while the other thread's MPI_Waitall waited for the collective: a
/// hang. With the hold process-wide, 1 run in 30 still hung under load: each thread tracked its
/// own episodes, so the main thread's stayed open after a handed-over instance until MPI gave
/// one of its handles to a new request, at a different point on each rank, and the ranks counted
/// the agreed instances differently. One thread at a time being inside MPI, the process's calls
/// are now one stream: every exchange closes an episode, whichever thread completed it. The
/// codelets that hold posts back and tuning with `neighbor` tried must complete it too.
fn an_exchange_completed_by_another_thread(flavour: Flavour) {
    let dir = scratch(&format!("halo-threads-handover-{}", flavour.name()));
    let program = compile(flavour, "threads_handover.c", &dir);
    for (knob, value) in [
        ("COMMTUNE_FORCE", "halo=neighbor"),
        ("COMMTUNE_FORCE", "halo=irecv_first"),
        ("COMMTUNE_FORCE", "halo=pairwise"),
        ("COMMTUNE_HALO_NEIGHBOR", "on"),
    ] {
        let report = tuned_on_two(flavour, (&program, &dir, "threads_handover"), (knob, value));
        let episodes: u64 = sites(&report)
            .iter()
            .filter(|s| s["op"] == "halo")
            .filter_map(|s| s["calls"].as_u64())
            .sum();
        assert_eq!(episodes, 300, "{knob}={value}: {report:#}");
        if let Some(codelet) = value.strip_prefix("halo=") {
            let ran = codelet_episodes(&report, codelet);
            assert!(ran > 0, "{codelet} never ran: {report:#}");
        }
    }
}

/// Runs `program` (built in `dir`) on 2 ranks under tuning with `knob`, checks the program's own
/// verdict "<name>: results correct", and returns the report.
fn tuned_on_two(
    flavour: Flavour,
    (program, dir, name): (&Path, &Path, &str),
    knob: (&str, &str),
) -> Value {
    let job = run(flavour, 2, program, dir)
        .env("COMMTUNE_MODE", "tune")
        .env(knob.0, knob.1)
        .go();
    assert!(
        job.output.status.success() && job.stdout().contains(&format!("{name}: results correct")),
        "{}={}:\n{}\n{}",
        knob.0,
        knob.1,
        job.stdout(),
        job.stderr()
    );
    job.report()
}

#[test]
fn an_exchange_completed_by_another_thread_openmpi() {
    an_exchange_completed_by_another_thread(OpenMpi);
}

#[test]
fn an_exchange_completed_by_another_thread_mpich() {
    an_exchange_completed_by_another_thread(Mpich);
}

/// Two threads of rank 0 send on one channel in an order the program sets, the first within an
/// episode whose codelet holds its send back (tests/programs/threads_channel_order.c): the second
/// thread's send overtook the held one, and rank 1 received them swapped, with `irecv_first`
/// forced and under tuning (MPICH). Forced `irecv_first` (which the test checks ran), forced
/// `pairwise` and tuning must all keep the program's order.
fn another_threads_post_keeps_the_channel_order(flavour: Flavour) {
    let dir = scratch(&format!("halo-threads-channel-order-{}", flavour.name()));
    let program = compile(flavour, "threads_channel_order.c", &dir);
    for (knob, value) in [
        ("COMMTUNE_FORCE", "halo=irecv_first"),
        ("COMMTUNE_FORCE", "halo=pairwise"),
        ("COMMTUNE_BUDGET", "1"),
    ] {
        let report = tuned_on_two(
            flavour,
            (&program, &dir, "threads_channel_order"),
            (knob, value),
        );
        if value == "halo=irecv_first" {
            let held = codelet_episodes(&report, "irecv_first");
            assert!(held > 0, "irecv_first never ran: {report:#}");
        }
    }
}

#[test]
fn another_threads_post_keeps_the_channel_order_openmpi() {
    another_threads_post_keeps_the_channel_order(OpenMpi);
}

#[test]
fn another_threads_post_keeps_the_channel_order_mpich() {
    another_threads_post_keeps_the_channel_order(Mpich);
}
