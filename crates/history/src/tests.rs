use std::time::Instant;

use super::*;

/// A fresh directory under the system's temporary directory.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "commtune-history-test-{}-{test}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn entry(n: u64) -> Entry {
    Entry {
        op: "allreduce".to_string(),
        comm_size: 4,
        ranks_per_node: Some(4),
        size_class: "64 B-96 B".to_string(),
        bytes: 64 + n % 32,
        signature: "count=8 datatype=MPI_DOUBLE op=MPI_SUM comm_size=4".to_string(),
        facts: "size=4 intercomm=false commutative=true large_counts=false too_large=false"
            .to_string(),
        mpi: "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, \
              2022"
            .to_string(),
        platform: Platform {
            host: "node#".to_string(),
            cpu: "AMD EPYC 7B13".to_string(),
            transport: "unknown".to_string(),
        },
        estimates: [
            "native",
            "linear",
            "recursive_doubling",
            "ring",
            "rabenseifner",
        ]
        .iter()
        .enumerate()
        .map(|(i, c)| Estimate {
            codelet: c.to_string(),
            // Whole nanoseconds, as stored.
            us: (10_000 + i as u64 * 1000 + n) as f64 / 1e3,
            error_us: 0.25,
        })
        .collect(),
        timing: Some("local".to_string()),
        reopened_from: None,
        realised_us: None,
        winner: "ring".to_string(),
        replaced: None,
        time: 1_795_000_000 + n,
        how: How::Search,
    }
}

fn name(n: usize) -> String {
    file_name("node017", 1000 + n as u32, 1)
}

#[test]
fn written_entries_read_back() {
    let dir = scratch("roundtrip");
    let entries: Vec<Entry> = (0..3).map(entry).collect();
    let path = write(&dir, &name(0), &entries).unwrap();
    assert!(path.starts_with(&dir));
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("{\"commtune_history\":2}\n"), "{text}");
    let loaded = load(&dir);
    assert_eq!(loaded.entries, entries);
    assert_eq!((loaded.files, loaded.skipped_files), (1, 0));
    assert_eq!(loaded.warning(&dir), None);
    assert_eq!(entries[0].winner_estimate().unwrap().codelet, "ring");
    // Estimates are stored as arrays, to the nanosecond.
    let mut e = entry(0);
    e.estimates[0].us = 1.234_567_8;
    let text = fs::read_to_string(write(&dir, &name(1), &[e]).unwrap()).unwrap();
    assert!(
        text.contains("\"estimates\":[[\"native\",1.235,0.25],"),
        "{text}"
    );
}

/// A file of version 1 (before entries said how they were timed) is read, its entries
/// without a timing.
#[test]
fn version_one_is_read_without_timing() {
    let dir = scratch("version1");
    fs::write(
        dir.join("old.jsonl"),
        "{\"commtune_history\":1}\n{\"op\":\"allreduce\",\"comm_size\":2,\"ranks_per_node\":2,\
         \"size_class\":\"8 B-12 B\",\"bytes\":8,\"signature\":\"\",\"facts\":\"size=2\",\
         \"mpi\":\"Open MPI v4.1.4\",\"platform\":{\"host\":\"vm\",\"cpu\":\"AMD EPYC\",\
         \"transport\":\"shared memory\"},\"estimates\":[[\"native\",0.197,0.026]],\
         \"winner\":\"native\",\"time\":1795516754,\"how\":\"calibrate\"}\n",
    )
    .unwrap();
    let text = fs::read_to_string(write(&dir, &name(0), &[entry(1)]).unwrap()).unwrap();
    assert!(text.contains(",\"timing\":\"local\","), "{text}");
    let loaded = load(&dir);
    assert_eq!(loaded.warning(&dir), None);
    assert_eq!((loaded.files, loaded.entries.len()), (2, 2));
    let timings: Vec<Option<&str>> = loaded.entries.iter().map(|e| e.timing.as_deref()).collect();
    assert_eq!(timings, [Some("local"), None]);
}

/// A header's other fields (a later version may add some) do not hide its version.
#[test]
fn a_header_is_its_version_whatever_else_it_holds() {
    let dir = scratch("header");
    let line = serde_json::to_string(&entry(1)).unwrap();
    fs::write(
        dir.join("noted.jsonl"),
        format!("{{\"note\":\"x\",\"commtune_history\":2}}\n{line}\n"),
    )
    .unwrap();
    fs::write(
        dir.join("later.jsonl"),
        format!("{{\"commtune_history\":3,\"note\":[1]}}\n{line}\n"),
    )
    .unwrap();
    let loaded = load(&dir);
    assert_eq!((loaded.files, loaded.entries.len()), (1, 1));
    let warning = loaded.warning(&dir).unwrap();
    assert!(
        warning.contains("later.jsonl: format version 3"),
        "{warning}"
    );
}

/// The winner's realised production time is written where it was measured and read back; an
/// entry without it (the older ones) writes no such field and reads as None.
#[test]
fn realised_time_is_written_only_where_measured() {
    let dir = scratch("realised");
    let mut measured = entry(1);
    measured.realised_us = Some(29_612.5);
    let text =
        fs::read_to_string(write(&dir, &name(0), &[measured.clone(), entry(2)]).unwrap()).unwrap();
    assert_eq!(text.matches("\"realised_us\":29612.5").count(), 1, "{text}");
    let loaded = load(&dir);
    assert_eq!(loaded.entries, [measured, entry(2)]);
    assert_eq!(loaded.entries[1].realised_us, None);
}

#[test]
fn concurrent_writers_lose_nothing() {
    let dir = scratch("concurrent");
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                for job in 0..20 {
                    // Every writer the same host, process and time: only the counter differs.
                    let name = file_name("node017", 42, 7);
                    let entries: Vec<Entry> =
                        (0..10).map(|i| entry(w * 1000 + job * 10 + i)).collect();
                    write(&dir, &name, &entries).unwrap();
                }
            })
        })
        .collect();
    // A reader meanwhile sees whole files only: it reads until it has seen some while the
    // writers are at work (or they are done).
    loop {
        let loaded = load(&dir);
        assert_eq!(loaded.warning(&dir), None);
        assert_eq!(loaded.entries.len(), loaded.files * 10);
        if loaded.files > 0 || writers.iter().all(|w| w.is_finished()) {
            break;
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    let loaded = load(&dir);
    assert_eq!(loaded.files, 160);
    assert_eq!(loaded.entries.len(), 1600);
    let mut times: Vec<u64> = loaded.entries.iter().map(|e| e.time).collect();
    times.sort();
    times.dedup();
    assert_eq!(times.len(), 1600, "every entry once");
    let leftovers = fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".tmp")
        })
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn truncated_file_keeps_its_whole_lines() {
    let dir = scratch("truncated");
    let path = write(&dir, &name(0), &(0..4).map(entry).collect::<Vec<_>>()).unwrap();
    let text = fs::read(&path).unwrap();
    fs::write(&path, &text[..text.len() - 40]).unwrap();
    let loaded = load(&dir);
    assert_eq!(loaded.entries.len(), 3);
    assert_eq!((loaded.files, loaded.skipped_lines), (1, 1));
    let warning = loaded.warning(&dir).unwrap();
    assert!(warning.contains("ignored 1 line ("), "{warning}");
    assert!(warning.contains("line 5"), "{warning}");
    assert!(!warning.contains('\n'));
}

#[test]
fn foreign_version_and_garbage_are_skipped_with_one_warning() {
    let dir = scratch("foreign");
    write(&dir, &name(0), &[entry(0)]).unwrap();
    fs::write(
        dir.join("a-future.jsonl"),
        "{\"commtune_history\":3}\n{\"op\":1}\n",
    )
    .unwrap();
    fs::write(dir.join("b-garbage.jsonl"), b"\x00\xffnot json at all").unwrap();
    fs::write(dir.join("c-empty.jsonl"), b"").unwrap();
    fs::write(
        dir.join("d-bad-lines.jsonl"),
        "{\"commtune_history\":1}\n[]\n{\n",
    )
    .unwrap();
    // Not the store's: a temporary file of a writer, another program's file.
    fs::write(dir.join(".x.jsonl.tmp"), b"half").unwrap();
    fs::write(dir.join("README"), b"hello").unwrap();
    let loaded = load(&dir);
    assert_eq!(loaded.entries, vec![entry(0)]);
    assert_eq!((loaded.files, loaded.skipped_files), (2, 3));
    assert_eq!(loaded.skipped_lines, 2);
    let warning = loaded.warning(&dir).unwrap();
    assert!(
        warning.contains(
            "ignored 3 files and 2 lines (a-future.jsonl: format version 3, this commtune reads 1 to 2)"
        ),
        "{warning}"
    );
    assert!(!warning.contains('\n'));
}

/// A pipe or a device named like a store file is skipped with the warning, not read: reading
/// would block forever or never end.
#[test]
fn pipes_and_devices_are_skipped() {
    let dir = scratch("special");
    write(&dir, &name(0), &[entry(0)]).unwrap();
    let fifo = dir.join("a-pipe.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    std::os::unix::fs::symlink("/dev/zero", dir.join("b-zero.jsonl")).unwrap();
    let loaded = load(&dir);
    assert_eq!(loaded.entries, vec![entry(0)]);
    assert_eq!((loaded.files, loaded.skipped_files), (1, 2));
    let warning = loaded.warning(&dir).unwrap();
    assert!(
        warning.contains("ignored 2 files (a-pipe.jsonl: not a regular file)"),
        "{warning}"
    );
}

#[test]
fn unreadable_directory_warns_and_gives_nothing() {
    let dir = scratch("unreadable");
    // A file where the directory should be: listing fails (as root too, unlike permissions).
    let not_a_dir = dir.join("file");
    fs::write(&not_a_dir, b"x").unwrap();
    let loaded = load(&not_a_dir);
    assert!(loaded.entries.is_empty());
    assert!(loaded.unreadable());
    assert!(!load(&dir).unreadable());
    let warning = loaded.warning(&not_a_dir).unwrap();
    assert!(
        warning.contains("ignored the store (cannot list the directory"),
        "{warning}"
    );
    // Writing there fails with an error, not a panic.
    assert!(write(&not_a_dir, &name(0), &[entry(0)]).is_err());
}

#[test]
fn missing_or_empty_directory_is_an_empty_store() {
    let dir = scratch("empty");
    let loaded = load(&dir);
    assert!(loaded.entries.is_empty());
    assert_eq!(loaded.warning(&dir), None);
    let missing = dir.join("not/there");
    let loaded = load(&missing);
    assert!(loaded.entries.is_empty());
    assert_eq!(loaded.warning(&missing), None);
    // The writer makes it.
    write(&missing, &name(0), &[entry(1)]).unwrap();
    assert_eq!(load(&missing).entries, vec![entry(1)]);
}

/// 10^5 entries in 100 files of 1000 (a job writes one entry per decided key): the time to load
/// them all, printed (`cargo test --release -p commtune-history -- --nocapture`).
#[test]
fn loads_a_hundred_thousand_entries() {
    let dir = scratch("large");
    let mut bytes = 0;
    for job in 0..100 {
        let entries: Vec<Entry> = (0..1000).map(|i| entry(job * 1000 + i)).collect();
        bytes += fs::metadata(write(&dir, &name(job as usize), &entries).unwrap())
            .unwrap()
            .len();
    }
    let start = Instant::now();
    let loaded = load(&dir);
    let elapsed = start.elapsed();
    assert_eq!(loaded.entries.len(), 100_000);
    assert_eq!(loaded.warning(&dir), None);
    println!(
        "history: loaded 100000 entries ({:.1} MB in 100 files) in {:.1} ms",
        bytes as f64 / 1e6,
        elapsed.as_secs_f64() * 1e3
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn platform_facts() {
    assert_eq!(host_pattern("node017"), "node#");
    assert_eq!(host_pattern("node017.cluster.example"), "node#");
    assert_eq!(host_pattern("login"), "login");
    assert_eq!(host_pattern("c3-12"), "c3-#");
    assert_eq!(host_pattern(""), "");
    let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\n\
                   model name\t: AMD EPYC 7B13  64-Core Processor\n";
    assert_eq!(cpu_model(cpuinfo), "AMD EPYC 7B13 64-Core Processor");
    assert_eq!(cpu_model("processor : 0\n"), "unknown");
    assert_eq!(date(0), "1970-01-01 00:00");
    assert_eq!(date(1_795_939_560), "2026-11-29 08:06");
    assert_eq!(date(951_782_400), "2000-02-29 00:00");
    let env = |pairs: &'static [(&str, &str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        default_dir(env(&[("XDG_STATE_HOME", "/s"), ("HOME", "/h")])),
        Some(PathBuf::from("/s/commtune/history"))
    );
    assert_eq!(
        default_dir(env(&[("XDG_STATE_HOME", "relative"), ("HOME", "/h")])),
        Some(PathBuf::from("/h/.local/state/commtune/history"))
    );
    assert_eq!(default_dir(env(&[])), None);
    let a = file_name("node/../1", 1, 2);
    assert!(!a.contains('/') && a.ends_with(".jsonl"), "{a}");
    assert_ne!(file_name("h", 1, 2), file_name("h", 1, 2));
}

/// What a corrupt or foreign store may hold, as entries (the library aborts on a panic, and its
/// reader runs at MPI_Init): each a sane entry with one thing wrong.
fn hostile() -> Vec<Entry> {
    let with = |change: &dyn Fn(&mut Entry)| {
        let mut e = entry(7);
        change(&mut e);
        e
    };
    let times = |us: &[(&str, f64)]| {
        let estimates = us
            .iter()
            .map(|&(codelet, us)| Estimate {
                codelet: codelet.to_string(),
                us,
                error_us: us,
            })
            .collect::<Vec<_>>();
        with(&move |e: &mut Entry| e.estimates = estimates.clone())
    };
    let mut all = vec![
        times(&[("native", f64::NAN), ("ring", 5.0)]),
        times(&[("native", f64::INFINITY), ("ring", f64::NEG_INFINITY)]),
        times(&[("native", -3.0), ("ring", 0.0)]),
        times(&[("native", 1e300), ("ring", 1e-300)]),
        times(&[("native", f64::MAX), ("ring", f64::MIN_POSITIVE)]),
        times(&[
            ("ring", 2.0),
            ("ring", 1.0),
            ("ring", f64::NAN),
            ("native", 3.0),
        ]),
        times(&[("native", f64::NAN)]),
        times(&[]),
        with(&|e| e.winner = "not a codelet".to_string()),
        with(&|e| e.winner.clear()),
        with(&|e| e.op.clear()),
        with(&|e| e.op = "bcast".to_string()),
        with(&|e| e.op = PING_PONG.to_string()),
        with(&|e| e.estimates[0].error_us = f64::NAN),
        with(&|e| e.estimates[1].codelet.clear()),
        with(&|e| e.timing = Some("sideways".to_string())),
        with(&|e| e.time = u64::MAX),
    ];
    for comm_size in [0, 1, 3, u32::MAX] {
        for bytes in [0, 1, 65, u64::MAX] {
            all.push(with(&|e| (e.comm_size, e.bytes) = (comm_size, bytes)));
        }
    }
    all
}

/// Hostile entries read from a store and given to the knowledge: the reader keeps what JSON can
/// hold (NaN and infinities cannot: those lines are skipped with the one warning), and neither
/// the analysis nor any prediction, decision map or leave-one-out panics; what sane entries
/// decided still predicts.
#[test]
fn hostile_entries_never_panic() {
    use crate::predict::{self, Knowledge, Predictor, Problem};

    let dir = scratch("hostile");
    let sane: Vec<Entry> = (0..8).map(entry).collect();
    write(&dir, &name(0), &sane).unwrap();
    write(&dir, &name(1), &hostile()).unwrap();
    let huge = r#"{"op":"allreduce","comm_size":99999999999,"size_class":"","bytes":1,"signature":"","facts":"","mpi":"","platform":{"host":"","cpu":"","transport":""},"estimates":[],"winner":"","time":0,"how":"search"}"#;
    let overflow = r#"{"op":"allreduce","comm_size":4,"size_class":"","bytes":-1,"signature":"","facts":"","mpi":"","platform":{"host":"","cpu":"","transport":""},"estimates":[["ring",1e999,0]],"winner":"","time":0,"how":"search"}"#;
    fs::write(
        dir.join("z-hostile-lines.jsonl"),
        format!(
            "{{\"commtune_history\":2}}\n{huge}\n{overflow}\n[[[[[[[[[[[[[[[[[[[[\n\"\\ud800\"\n"
        ),
    )
    .unwrap();
    let loaded = load(&dir);
    // Five entries with a time JSON cannot hold (NaN, infinities: written as null) and the four
    // bad lines.
    assert_eq!(loaded.skipped_lines, 5 + 4, "{:?}", loaded.first_problem);
    let warning = loaded.warning(&dir).expect("a warning");
    assert!(!warning.contains('\n'));
    assert_eq!(loaded.entries.len(), sane.len() + hostile().len() - 5);

    let applicable: [&dyn Fn(&str) -> bool; 4] = [&|_| true, &|_| false, &|c| c == "ring", &|c| {
        c == "not a codelet"
    }];
    let predict_all = |knowledge: &Knowledge| {
        for op in ["allreduce", "bcast", "", PING_PONG] {
            for comm_size in [0, 1, 2, 4, 5, u32::MAX] {
                for bytes in [0, 1, 64, 70, 1 << 20, u64::MAX] {
                    let problem = Problem {
                        op,
                        comm_size,
                        bytes,
                    };
                    for (a, applicable) in applicable.iter().enumerate() {
                        for predictor in [Predictor::Closest, Predictor::Vote, Predictor::Map] {
                            if let Some(p) = knowledge.predict_with(&problem, applicable, predictor)
                            {
                                assert!(applicable(&p.winner), "{a}: {p:?}");
                                assert!(p.us >= 0.0, "{p:?}");
                            }
                        }
                    }
                }
            }
            knowledge.map().depth(op);
            knowledge.map().ranges(op, 4);
        }
    };
    let in_memory: Vec<Entry> = sane.iter().cloned().chain(hostile()).collect();
    for entries in [&loaded.entries, &in_memory] {
        for pmax in [0.0, 0.1, 1e300] {
            let mut knowledge = Knowledge::new(entries, pmax);
            predict_all(&knowledge);
            let ring = knowledge.predict(
                &Problem {
                    op: "allreduce",
                    comm_size: 4,
                    bytes: 70,
                },
                &|_| true,
            );
            // The job's decision at exactly this size, though native's estimate is the least.
            assert_eq!(ring.map(|p| p.winner), Some("ring".to_string()));
            // Decisions of the run added one by one, as the library learns them.
            for e in hostile() {
                knowledge.add(e);
            }
            predict_all(&knowledge);
            let measured = predict::merge(entries);
            for predictor in [Predictor::Closest, Predictor::Vote, Predictor::Map] {
                predict::leave_one_out(&measured, pmax, predictor);
                predict::against(&knowledge, &measured, pmax, predictor);
            }
            let all: Vec<_> = measured.iter().collect();
            crate::map::leave_one_out(&all, pmax);
        }
    }
}

#[test]
fn a_replaced_winner_is_written_and_read_back_and_absent_otherwise() {
    let dir = scratch("replaced");
    let mut checked = entry(1);
    checked.replaced = Some(Replaced {
        codelet: "native".to_string(),
        realised_us: 25.5,
    });
    let entries = [entry(0), checked];
    let path = write(&dir, &name(0), &entries).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("\"replaced\"").count(), 1, "{text}");
    assert!(
        text.contains("\"replaced\":{\"codelet\":\"native\",\"realised_us\":25.5}"),
        "{text}"
    );
    assert!(
        text.starts_with("{\"commtune_history\":2}\n"),
        "no new version"
    );
    let loaded = load(&dir);
    assert_eq!(loaded.entries, entries);
    assert_eq!(loaded.warning(&dir), None);
}

#[test]
fn a_replaced_winner_ranks_behind_its_runner_up_or_is_left_out() {
    let estimates = || {
        crate::testing::entry(
            "alltoall",
            4,
            1024,
            &[("a", 10.0), ("b", 12.0), ("c", 13.0)],
        )
        .estimates
    };
    let replaced = |realised_us| Replaced {
        codelet: "a".to_string(),
        realised_us,
    };
    let times = |e: &[Estimate]| -> Vec<(String, f64)> {
        e.iter().map(|c| (c.codelet.clone(), c.us)).collect()
    };
    // The runner-up held its estimate exactly: the replaced one's realised time as it is.
    let mut e = estimates();
    replaced(20.0).correct(&mut e, "b", Some(12.0));
    assert_eq!(times(&e)[0], ("a".to_string(), 20.0));
    assert_eq!(e[0].error_us, 0.1, "the search's error");
    assert_eq!(
        &times(&e)[1..],
        &times(&estimates())[1..],
        "the others stay"
    );
    // Unusable times: the estimate the self-check found wrong is left out.
    for (realised, runner_up_realised) in [
        (20.0, None),
        (20.0, Some(0.0)),
        (f64::NAN, Some(12.0)),
        // Slower than the replaced one in production (a check never replaces a winner then).
        (11.0, Some(12.0)),
    ] {
        let mut e = estimates();
        replaced(realised).correct(&mut e, "b", runner_up_realised);
        assert_eq!(
            times(&e),
            times(&estimates())[1..],
            "{realised} {runner_up_realised:?}"
        );
    }
    // A runner-up that paces replaced "a" ahead of "b", which production never measured: "b"
    // is left out, and "c" ranks first.
    let mut e = estimates();
    replaced(20.0).correct(&mut e, "c", Some(13.0));
    assert_eq!(
        times(&e),
        [("a".to_string(), 20.0), ("c".to_string(), 13.0)],
        "b's estimate misled as a's did"
    );
    // A replaced codelet the search did not measure: nothing to correct.
    let mut e = estimates();
    Replaced {
        codelet: "z".to_string(),
        realised_us: 20.0,
    }
    .correct(&mut e, "b", Some(12.0));
    assert_eq!(e, estimates());
}
