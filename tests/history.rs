//! The history store (COMMTUNE_HISTORY) with real Open MPI jobs: rank 0 records what the searches
//! decided, `commtune history` lists it, jobs finishing at once lose nothing, and a damaged or
//! unwritable store is one warning line, never a failed job.

mod common;

use std::path::Path;
use std::process::Command;

use common::{ALLREDUCE, Job, OpenMpi, Run, all_but, cli, compile, run, scratch};

/// tuned_loop on 2 ranks, searching at once (COMMTUNE_BUDGET=1), with every allreduce codelet
/// but ring slowed down, recording into `store`.
fn tuned<'a>(exe: &Path, dir: &'a Path, store: &Path) -> Run<'a> {
    // 20 ms: two jobs share the machine, whose noise can reach 10 ms a call.
    let delays = all_but("allreduce", ALLREDUCE, "ring", "20ms");
    run(OpenMpi, 2, exe, dir)
        .args(&["300"])
        .env("COMMTUNE_MODE", "tune")
        .env("COMMTUNE_BUDGET", "1")
        .env("COMMTUNE_INJECT_DELAY", &delays.join(","))
        .env("COMMTUNE_HISTORY", &store.to_string_lossy())
}

fn correct(job: &Job) {
    job.assert_success();
    assert!(
        job.stdout().contains("tuned_loop: results correct"),
        "{}",
        job.stdout()
    );
}

/// The lines of the library's warnings about the store.
fn warnings(job: &Job) -> Vec<String> {
    job.stderr()
        .lines()
        .filter(|l| l.contains("history store"))
        .map(String::from)
        .collect()
}

fn allreduce_entries(store: &Path) -> Vec<commtune_history::Entry> {
    let loaded = commtune_history::load(store);
    assert_eq!(loaded.warning(store), None);
    loaded
        .entries
        .into_iter()
        .filter(|e| e.op == "allreduce")
        .collect()
}

#[test]
fn decided_keys_are_recorded_and_listed() {
    let dir = scratch("history_recorded");
    let exe = compile(OpenMpi, "tuned_loop.c", &dir);
    let store = dir.join("store");
    let job = tuned(&exe, &dir, &store).go();
    correct(&job);
    assert_eq!(warnings(&job), Vec::<String>::new());
    let files: Vec<_> = std::fs::read_dir(&store).unwrap().collect();
    assert_eq!(files.len(), 1, "one file per job");
    let entries = allreduce_entries(&store);
    assert_eq!(entries.len(), 1, "{entries:#?}");
    let e = &entries[0];
    assert_eq!(e.winner, "ring", "{e:#?}");
    assert_eq!((e.comm_size, e.ranks_per_node), (2, Some(2)));
    assert_eq!((e.bytes, e.size_class.as_str()), (64, "64 B-96 B"));
    assert!(e.signature.contains("MPI_DOUBLE") && e.signature.contains("MPI_SUM"));
    assert!(e.facts.contains("commutative=true"), "{}", e.facts);
    assert!(e.mpi.contains("Open MPI"), "{}", e.mpi);
    assert_eq!(e.platform.transport, "shared memory");
    assert_eq!(e.how, commtune_history::How::Search);
    let native = e.estimates.iter().find(|c| c.codelet == "native").unwrap();
    let ring = e.winner_estimate().expect("the winner's estimate");
    assert!(native.us > ring.us + 1000.0, "{e:#?}");

    let out = Command::new(cli())
        .args(["history", "--dir"])
        .arg(&store)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.contains(" allreduce "))
        .unwrap_or_else(|| panic!("no allreduce line:\n{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert!(
        words.contains(&"ring") && words.contains(&"search"),
        "{line}"
    );
    assert!(line.contains("native=") && line.contains("ring="), "{line}");
}

#[test]
fn two_jobs_at_once_lose_nothing() {
    let dir = scratch("history_together");
    let exe = compile(OpenMpi, "tuned_loop.c", &dir);
    let store = dir.join("store");
    let jobs = Run::go_together(vec![
        tuned(&exe, &dir, &store).env("COMMTUNE_REPORT", "first.json"),
        tuned(&exe, &dir, &store).env("COMMTUNE_REPORT", "second.json"),
    ]);
    for job in &jobs {
        correct(job);
        assert_eq!(warnings(job), Vec::<String>::new());
    }
    assert_eq!(std::fs::read_dir(&store).unwrap().count(), 2);
    let entries = allreduce_entries(&store);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert!(entries.iter().all(|e| e.winner == "ring"), "{entries:#?}");
}

#[test]
fn damaged_store_is_one_warning_and_the_job_goes_on() {
    let dir = scratch("history_damaged");
    let exe = compile(OpenMpi, "tuned_loop.c", &dir);
    let store = dir.join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("garbage.jsonl"), b"\x00\x01 not a history file").unwrap();
    std::fs::write(
        store.join("future.jsonl"),
        "{\"commtune_history\":99}\n{}\n",
    )
    .unwrap();
    std::fs::write(
        store.join("truncated.jsonl"),
        "{\"commtune_history\":1}\n{\"op\":\"allreduce\",\"comm_si",
    )
    .unwrap();
    let job = tuned(&exe, &dir, &store).go();
    correct(&job);
    // Every rank reads the store for its predictions; rank 0 says once what it skipped.
    let lines = warnings(&job);
    assert_eq!(lines.len(), 1, "{}", job.stderr());
    assert!(
        lines[0].contains("ignored 2 files and 1 line"),
        "{}",
        lines[0]
    );
    // The job's own entries were added all the same; reading says once what it skipped.
    let loaded = commtune_history::load(&store);
    assert_eq!(loaded.files, 2, "the truncated file and the job's");
    assert!(loaded.entries.iter().any(|e| e.winner == "ring"));
    let warning = loaded.warning(&store).expect("a warning");
    assert!(warning.contains("ignored 2 files and 1 line"), "{warning}");

    // A store that is not a directory: one line when reading it (an empty store then), one
    // when adding to it, and the job succeeds.
    let not_a_dir = dir.join("plain-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let job = tuned(&exe, &dir, &not_a_dir).go();
    correct(&job);
    let lines = warnings(&job);
    assert_eq!(lines.len(), 2, "{}", job.stderr());
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cannot list the directory")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cannot add to the history store")),
        "{lines:?}"
    );
}

#[test]
fn off_writes_nothing() {
    let dir = scratch("history_off");
    let exe = compile(OpenMpi, "tuned_loop.c", &dir);
    let job = tuned(&exe, &dir, Path::new("off")).go();
    correct(&job);
    assert!(!dir.join("off").exists());
    assert!(!dir.join("history").exists());
}
