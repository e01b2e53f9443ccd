//! Legal programs that once hung, crashed or computed wrong results under default tuning (issue
//! 16 and later): handles freed and reused for other objects, a datatype freed while its messages
//! are in flight, MPI calls the library cannot see (MPICH's mpi_f08), a completion call that
//! fails for one of its messages, a send type MPI ignores (in place), an attribute cached on a
//! communicator, no communicator context left for the library, more local variants or signatures
//! than the library keeps apart, a call MPI rejects inside a codelet, a child forked after
//! MPI_Init.
//! Each runs under both MPIs with default tuning and with COMMTUNE_HALO_NEIGHBOR=on (which adds
//! agreement points to every collective); a hang fails the test by its job timeout.

mod common;

use common::{
    ALLREDUCE, ALLTOALL, Flavour, Job, Mpich, OpenMpi, all_but, compile, marker_line, run, scratch,
    site_at_line,
};

/// Runs `program` with `args` under tuning with `env`, once per setting of
/// COMMTUNE_HALO_NEIGHBOR, and checks the program's own verdict "<name>: results correct".
fn tuned(flavour: Flavour, np: usize, program: &str, args: &[&str], env: &[(&str, &str)]) -> Job {
    let (name, language) = program.split_once('.').expect("a source file");
    let mut last = None;
    for neighbor in ["off", "on"] {
        let dir = scratch(&format!(
            "never_break_{name}_{language}_{neighbor}_{}",
            flavour.name()
        ));
        let exe = compile(flavour, program, &dir);
        let mut job = run(flavour, np, &exe, &dir)
            .args(args)
            .env("COMMTUNE_MODE", "tune")
            // Search every call as soon as it is warm (no do-no-harm wait): the most switching.
            .env("COMMTUNE_BUDGET", "1")
            .env("COMMTUNE_HALO_NEIGHBOR", neighbor);
        for (k, v) in env {
            job = job.env(k, v);
        }
        let job = job.go();
        job.assert_success();
        assert!(
            job.stdout().contains(&format!("{name}: results correct")),
            "neighbor={neighbor}\n{}",
            job.stdout()
        );
        last = Some(job);
    }
    last.expect("two runs")
}

#[test]
fn local_variants_on_two_communicators_openmpi() {
    tuned(OpenMpi, 3, "local_variants_comms.c", &[], &[]);
}

#[test]
fn local_variants_on_two_communicators_mpich() {
    tuned(Mpich, 2, "local_variants_comms.c", &["200"], &[]);
}

/// Rank 0's datatype handle comes back for a type of another size: the program must say so,
/// or it tested nothing. Open MPI's handles are pointers to memory from malloc, and glibc gives
/// a freed chunk to the next request of its size only while the per-size cache of freed chunks
/// has room (7 by default): the library's nonblocking checkpoints (libnbc's schedules) fill it,
/// and then no handle came back. An unbounded cache makes it come back every time.
fn type_reuse(flavour: Flavour, np: usize) {
    let delays = all_but("alltoall", ALLTOALL, "pairwise", "5ms").join(",");
    let job = tuned(
        flavour,
        np,
        "type_reuse.c",
        &[],
        &[
            ("COMMTUNE_INJECT_DELAY", &delays),
            ("GLIBC_TUNABLES", "glibc.malloc.tcache_count=65535"),
        ],
    );
    assert!(
        !job.stdout().contains("type_reuse: 0 handles reused"),
        "{}",
        job.stdout()
    );
}

#[test]
fn freed_datatype_handle_reused_for_another_size_openmpi() {
    type_reuse(OpenMpi, 3);
}

#[test]
fn freed_datatype_handle_reused_for_another_size_mpich() {
    type_reuse(Mpich, 2);
}

/// A halo exchange frees its derived datatype between posting its messages and completing them,
/// which the standard allows (they complete normally). Tuned, and with `pack` forced (which
/// unpacks each receive at its completion), the library must not use the freed type: both MPIs
/// crashed in the first episodes (a freed type's size and name read when the episode closed,
/// receives unpacked with it).
fn type_freed_in_flight(flavour: Flavour, np: usize) {
    tuned_then_forced(flavour, np, "type_freed_in_flight.c", &["pack"]);
}

/// Runs `program` as `tuned` does, then again with each of `codelets` forced, which must have run.
fn tuned_then_forced(flavour: Flavour, np: usize, program: &str, codelets: &[&str]) {
    tuned(flavour, np, program, &[], &[]);
    for codelet in codelets {
        let force = format!("halo={codelet}");
        let forced = tuned(flavour, np, program, &[], &[("COMMTUNE_FORCE", &force)]);
        let report = forced.report();
        let ran: u64 = common::sites(&report)
            .iter()
            .filter_map(|s| s["codelets"][codelet].as_u64())
            .sum();
        assert!(ran > 0, "{codelet} never ran: {report:#}");
    }
}

#[test]
fn datatype_freed_while_its_messages_are_in_flight_openmpi() {
    type_freed_in_flight(OpenMpi, 3);
}

#[test]
fn datatype_freed_while_its_messages_are_in_flight_mpich() {
    type_freed_in_flight(Mpich, 2);
}

/// A halo send, then a blocking MPI_Probe for the peer's reply to it, then the receive, through
/// `use mpi_f08`: MPICH's mpi_f08 bindings call PMPI_Probe (and PMPI_Init, PMPI_Barrier, ...)
/// directly, so a codelet that holds the send back until the receive (`irecv_first`) hung the
/// job there. Tuned, and with `irecv_first` forced, no such codelet runs, and the report says why.
fn f08_probe(flavour: Flavour) {
    tuned(flavour, 2, "f08_probe.F90", &[], &[]);
    let forced = tuned(
        flavour,
        2,
        "f08_probe.F90",
        &[],
        &[("COMMTUNE_FORCE", "halo=irecv_first")],
    );
    let report = forced.report();
    let halo: Vec<&serde_json::Value> = common::sites(&report)
        .iter()
        .filter(|s| s["op"] == "halo")
        .collect();
    assert!(!halo.is_empty(), "{report:#}");
    for site in halo {
        assert!(site["codelets"].get("irecv_first").is_none(), "{site:#}");
        assert!(
            site["notes"]
                .to_string()
                .contains("so not every MPI call is visible"),
            "{site:#}"
        );
    }
}

#[test]
fn f08_bindings_that_call_pmpi_hold_nothing_back_openmpi() {
    f08_probe(OpenMpi);
}

#[test]
fn f08_bindings_that_call_pmpi_hold_nothing_back_mpich() {
    f08_probe(Mpich);
}

/// One of two strided receives completed by MPI_Waitall is truncated under MPI_ERRORS_RETURN
/// (tests/programs/packed_receive_error.c): MPI_Waitall returns MPI_ERR_IN_STATUS, and the other
/// receive completed and must hold its data. With `pack` forced it stayed packed (the library
/// unpacked nothing after a failed call) and the entry outlived its request, whose handle MPI
/// gives out again. With `pairwise` forced MPI_Waitall returned MPI_SUCCESS: the failure was in
/// a step before it, which left the request inactive; where MPI_Waitall itself failed, the
/// library's persistent requests stayed non-null and listed as started, and Open MPI, which frees
/// a failed one, gave its handle to the next receive, which the library then freed: a hang.
/// MPICH's failed persistent request reported its failure to the handler a second time.
/// Completed by the other calls (Waitany, Waitsome, Wait, Testall, Testsome, Testany, Test), a
/// failed call left the library's persistent requests in the application's array (it knew
/// which requests completed only from MPI_Waitall's statuses), where MPI_REQUEST_NULL belongs:
/// the next MPI_Waitany found nothing to complete. And Open MPI's MPI_Testall and MPI_Testany
/// returned MPI_SUCCESS over the library's failed persistent request, where over the
/// application's own they fail: the failure reached neither the application nor its handler.
fn packed_receive_error(flavour: Flavour) {
    tuned_then_forced(
        flavour,
        2,
        "packed_receive_error.c",
        &["pack", "pairwise", "persistent"],
    );
}

#[test]
fn a_failed_completion_still_delivers_the_receives_it_completed_openmpi() {
    packed_receive_error(OpenMpi);
}

#[test]
fn a_failed_completion_still_delivers_the_receives_it_completed_mpich() {
    packed_receive_error(Mpich);
}

/// Two tests, `$openmpi` and `$mpich`, that run `$program` as `tuned` does with no arguments or
/// knobs: on 3 ranks of Open MPI, on 2 of MPICH.
macro_rules! tuned_under_both {
    ($program:literal, $openmpi:ident, $mpich:ident) => {
        #[test]
        fn $openmpi() {
            tuned(OpenMpi, 3, $program, &[], &[]);
        }

        #[test]
        fn $mpich() {
            tuned(Mpich, 2, $program, &[], &[]);
        }
    };
}

// Alltoall and allgatherv in place, where MPI ignores the send count and type: rank 0 passes
// MPI_DATATYPE_NULL (tests/programs/in_place_null_sendtype.c). The library took rank 0's calls
// for invalid, passed them to MPI uncounted, and the other ranks' checkpoints waited for it: a
// hang.
tuned_under_both!(
    "in_place_null_sendtype.c",
    in_place_send_type_is_ignored_openmpi,
    in_place_send_type_is_ignored_mpich
);

// A communicator with an attribute whose delete callback frees its value
// (tests/programs/attribute_copies.c): the library's duplicate for tuning copied the attribute
// (MPI_Comm_dup runs the copy callbacks), so the value was freed twice, and the process aborted.
tuned_under_both!(
    "attribute_copies.c",
    the_librarys_duplicate_copies_no_attribute_openmpi,
    the_librarys_duplicate_copies_no_attribute_mpich
);

/// A program that uses every communicator context MPI has (tests/programs/contexts_exhausted.c),
/// then calls MPI_Allreduce on a communicator whose handler is fatal: the library's duplicate of
/// it failed into that handler, and MPICH aborted the job. The calls now run natively, and the
/// report says why. MPICH runs out (about 2000 contexts); Open MPI gives all the program asks.
#[test]
fn no_context_left_for_the_librarys_duplicate_mpich() {
    let job = tuned(Mpich, 2, "contexts_exhausted.c", &[], &[]);
    assert!(
        job.stdout().contains("MPI refused more: yes"),
        "MPICH gave every context asked for: {}",
        job.stdout()
    );
    assert!(untuned_for_want_of_a_duplicate(&job), "{:#}", job.report());
}

#[test]
fn no_context_left_for_the_librarys_duplicate_openmpi() {
    tuned(OpenMpi, 2, "contexts_exhausted.c", &[], &[]);
}

/// Whether some site of `job`'s report says the library could not duplicate its communicator.
fn untuned_for_want_of_a_duplicate(job: &Job) -> bool {
    common::sites(&job.report()).iter().any(|s| {
        s["tuning"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("could not duplicate"))
    })
}

/// More communicators than the library keeps duplicates of (comms::MAX_PRIVATE), more of them on
/// ranks 0 and 1 than on rank 2 (tests/programs/many_comms.c): for the last communicator, of
/// every rank, rank 2 may make a duplicate where the others may not. The ranks must agree not to
/// (one that went on alone would wait in MPI_Comm_split), and the report says why.
fn many_comms(flavour: Flavour) {
    let job = tuned(flavour, 3, "many_comms.c", &[], &[]);
    assert!(untuned_for_want_of_a_duplicate(&job), "{:#}", job.report());
}

#[test]
fn more_communicators_than_the_library_duplicates_openmpi() {
    many_comms(OpenMpi);
}

#[test]
fn more_communicators_than_the_library_duplicates_mpich() {
    many_comms(Mpich);
}

fn signature_cap(flavour: Flavour, np: usize) {
    let delays = all_but("alltoall", ALLTOALL, "pairwise", "5ms").join(",");
    let job = tuned(
        flavour,
        np,
        "signature_cap.c",
        &[],
        &[("COMMTUNE_INJECT_DELAY", &delays)],
    );
    // Past the limit rank 0's calls are reported together, and still ran the codelet the
    // tuned key settled on (whichever the loaded machine let win; never native, 5 ms slower).
    let report = job.report();
    let line = marker_line("signature_cap.c", "SITE:alltoall");
    let at_line = |prefix: &str| {
        common::sites(&report)
            .iter()
            .find(|s| {
                s["line"].as_u64() == Some(line)
                    && s["signature"].as_str().unwrap().starts_with(prefix)
            })
            .unwrap_or_else(|| panic!("no site {prefix}"))
    };
    let tuned = at_line("sendcount=4096 sendtype=MPI_INT");
    let winner = tuned["tuning"]["winner"].as_str().expect("tuned");
    assert_ne!(winner, "native", "{tuned:#}");
    let folded = at_line("signatures beyond");
    assert!(
        folded["codelets"][winner].as_u64().unwrap_or(0) > 0,
        "{folded:#}"
    );
}

#[test]
fn one_rank_alone_past_the_signature_limit_openmpi() {
    signature_cap(OpenMpi, 3);
}

#[test]
fn one_rank_alone_past_the_signature_limit_mpich() {
    signature_cap(Mpich, 2);
}

/// The commutative operation's site settles on ring; the non-commutative one that gets its
/// handle must not run it (`program`: C, or Fortran, whose MPI_OP_FREE Open MPI's bindings do
/// not route through the C entry point). Forced ring must fall back to native for it, call by
/// call.
fn op_reuse(flavour: Flavour, np: usize, program: &str) {
    let delays = all_but("allreduce", ALLREDUCE, "ring", "5ms").join(",");
    let job = tuned(
        flavour,
        np,
        program,
        &[],
        &[("COMMTUNE_INJECT_DELAY", &delays)],
    );
    assert!(
        job.stdout().contains("op_reuse: handle reused"),
        "{}",
        job.stdout()
    );
    let dir = scratch(&format!("never_break_op_reuse_forced_{}", flavour.name()));
    let exe = compile(flavour, program, &dir);
    let job = run(flavour, np, &exe, &dir)
        .env("COMMTUNE_FORCE", "allreduce=ring")
        .go();
    job.assert_success();
    assert!(
        job.stdout().contains("op_reuse: results correct"),
        "{}",
        job.stdout()
    );
    let report = job.report();
    let site = site_at_line(&report, marker_line(program, "SITE:allreduce"));
    assert!(site["codelets"]["ring"].as_u64().unwrap() > 0, "{site:#}");
    assert!(site["codelets"]["native"].as_u64().unwrap() > 0, "{site:#}");
}

#[test]
fn user_op_handle_reused_for_a_non_commutative_op_openmpi() {
    op_reuse(OpenMpi, 3, "op_reuse.c");
    op_reuse(OpenMpi, 3, "op_reuse.F90");
}

#[test]
fn user_op_handle_reused_for_a_non_commutative_op_mpich() {
    op_reuse(Mpich, 2, "op_reuse.c");
    op_reuse(Mpich, 2, "op_reuse.F90");
}

/// (rank, native error class, tool error class) per rank of codelet_error.c.
fn error_classes(job: &Job) -> Vec<(u32, i64, i64)> {
    let mut ranks: Vec<(u32, i64, i64)> = job
        .stdout()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.strip_prefix("codelet_error: rank ")?.split(' ').collect();
            Some((w[0].parse().ok()?, w[2].parse().ok()?, w[4].parse().ok()?))
        })
        .collect();
    ranks.sort();
    ranks
}

/// Every alltoall codelet forced on a call MPI rejects (MPICH 4.0.2 truncates large in-place
/// MPI_DOUBLE_INT blocks on every rank; Open MPI runs it): every rank returns, with native's
/// error class. `bruck` moves packed bytes, which MPICH does not truncate: it may succeed.
fn codelet_error(flavour: Flavour, np: usize) {
    let dir = scratch(&format!("never_break_codelet_error_{}", flavour.name()));
    let exe = compile(flavour, "codelet_error.c", &dir);
    for codelet in ALLTOALL {
        let job = run(flavour, np, &exe, &dir)
            .env("COMMTUNE_FORCE", &format!("alltoall={codelet}"))
            .go();
        job.assert_success();
        let ranks = error_classes(&job);
        assert_eq!(
            ranks.len(),
            np,
            "{codelet}: every rank returned\n{}",
            job.stdout()
        );
        for (rank, native, tool) in ranks {
            assert!(
                tool == native || (*codelet == "bruck" && tool == 0),
                "{codelet}: rank {rank} returned class {tool}, native {native}"
            );
        }
    }
}

#[test]
fn codelets_return_the_error_mpi_gives_without_waiting_openmpi() {
    codelet_error(OpenMpi, 3);
}

#[test]
fn codelets_return_the_error_mpi_gives_without_waiting_mpich() {
    codelet_error(Mpich, 3);
}

/// A child forked by rank 0 exits after the report was written: it must not replace it.
fn fork_child(flavour: Flavour, np: usize) {
    let dir = scratch(&format!("never_break_fork_child_{}", flavour.name()));
    let exe = compile(flavour, "fork_child.c", &dir);
    let job = run(flavour, np, &exe, &dir).go();
    job.assert_success();
    assert!(
        job.stdout().contains("fork_child: child exited (0)"),
        "{}",
        job.stdout()
    );
    assert_eq!(job.report()["ranks_reporting"], np as u64);
}

#[test]
fn forked_child_leaves_the_report_alone_openmpi() {
    fork_child(OpenMpi, 3);
}

#[test]
fn forked_child_leaves_the_report_alone_mpich() {
    fork_child(Mpich, 2);
}
