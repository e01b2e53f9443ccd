//! `commtune map` on a hand-written history store: the decision map per operation and the
//! leave-one-out prediction rates, one section per MPI library, platform and timing; a damaged
//! file is one warning line.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{cli, scratch};

const HEADER: &str = "{\"commtune_history\":1}\n";

/// One entry line: `small` is latency-bound, `large` bandwidth-bound; they cross at 40 000 bytes.
fn crossover(mpi: &str, op: &str, comm_size: u32, bytes: u64) -> String {
    let b = bytes as f64;
    let (small, large) = (10.0 + b * 1e-3, 30.0 + b * 5e-4);
    let winner = if small < large { "small" } else { "large" };
    format!(
        "{{\"op\":\"{op}\",\"comm_size\":{comm_size},\"size_class\":\"\",\"bytes\":{bytes},\
         \"signature\":\"\",\"facts\":\"\",\"mpi\":\"{mpi}\",\"platform\":{{\"host\":\"node#\",\
         \"cpu\":\"cpu\",\"transport\":\"unknown\"}},\"estimates\":[[\"small\",{small:.3},0.1],\
         [\"large\",{large:.3},0.1]],\"winner\":\"{winner}\",\"time\":1795000000,\"how\":\"search\"}}\n"
    )
}

/// Two jobs of Open MPI (allreduce and alltoall at 2 and 4 ranks, 8 B to 4 MiB) and one of MPICH.
fn store(dir: &Path) {
    for job in 0..2 {
        let mut text = HEADER.to_string();
        for op in ["allreduce", "alltoall"] {
            for comm_size in [2, 4] {
                for k in 3..=22 {
                    text.push_str(&crossover("Open MPI v4.1.4", op, comm_size, 1 << k));
                }
            }
        }
        std::fs::write(dir.join(format!("node1-{job}-1-0.jsonl")), text).unwrap();
    }
    let mut text = HEADER.to_string();
    for k in 3..=22 {
        text.push_str(&crossover("MPICH Version: 4.0", "allreduce", 4, 1 << k));
    }
    std::fs::write(dir.join("node1-9-1-0.jsonl"), text).unwrap();
}

fn map(args: &[&str]) -> (Output, String, String) {
    let output = Command::new(cli())
        .arg("map")
        .args(args)
        .env_remove("COMMTUNE_HISTORY")
        .output()
        .expect("commtune runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

/// The lines of the section whose heading starts with `heading`, up to the next heading of the
/// same level.
fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    let level = heading.split(' ').next().unwrap();
    let mut lines = text.lines().skip_while(|l| !l.starts_with(heading));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no {heading:?} in\n{text}"));
    let mut out = vec![first];
    out.extend(lines.take_while(|l| !l.starts_with(&format!("{level} "))));
    out
}

#[test]
fn map_shows_the_crossover_and_predicts_the_unseen_problems() {
    let dir = scratch("map_crossover");
    store(&dir);
    let (output, stdout, stderr) = map(&["--dir", dir.to_str().unwrap(), "--pmax", "10"]);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let report = &stdout;
    assert!(
        stdout.starts_with(&format!(
            "history {}: 180 entries in 3 files",
            dir.display()
        )),
        "{report}"
    );
    // The libraries do not mix; version-1 entries are of unknown timing.
    let mpich = section(
        &stdout,
        "## MPICH Version: 4.0 on node# (cpu, transport unknown)",
    );
    assert!(
        mpich[0]
            .ends_with(", timing unknown (format 1 did not record it): 20 entries, 20 problems"),
        "{report}"
    );
    let open_mpi = section(&stdout, "## Open MPI v4.1.4 on node#");
    assert!(
        open_mpi[0].ends_with(": 160 entries, 80 problems"),
        "{report}"
    );

    let open_mpi = open_mpi.join("\n");
    let allreduce = section(&open_mpi, "### allreduce: 40 problems");
    assert!(
        allreduce[0].ends_with("communicator sizes 2, 4"),
        "{report}"
    );
    assert!(allreduce[1].starts_with("decision map (quadtree, tolerance 10.0 %): depth max "));
    // At each communicator size: `small` up to a boundary between 32 and 64 KiB, then `large`.
    let rows: Vec<Vec<&str>> = allreduce
        .iter()
        .skip_while(|l| !l.starts_with("ranks"))
        .skip(1)
        .take_while(|l| !l.starts_with("prediction"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 4, "{report}");
    for pair in rows.chunks(2) {
        let (first, second) = (&pair[0], &pair[1]);
        assert_eq!(first.last(), Some(&"small"), "{report}");
        assert_eq!(second.last(), Some(&"large"), "{report}");
        let boundary: u64 = second[second.len() - 6].parse().unwrap();
        assert!((32768..65536).contains(&boundary), "{report}");
    }
    // Leave-one-out: noiseless, one crossover; only its neighbours can miss.
    let fit = allreduce
        .iter()
        .find(|l| l.starts_with("fit*"))
        .unwrap_or_else(|| panic!("the fit is the library's predictor\n{report}"));
    let within: f64 = fit.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(within >= 90.0, "{report}");
    assert!(
        allreduce.iter().any(|l| l.starts_with("vote ")),
        "the vote next to it\n{report}"
    );
    assert!(
        fit.contains(" / 100.0 / "),
        "every problem predicted\n{report}"
    );
    assert!(
        stdout.contains("### all operations\ndecision maps: leave-one-out penalty mean "),
        "{report}"
    );
}

#[test]
fn one_operation_and_a_damaged_file_give_one_warning() {
    let dir = scratch("map_damaged");
    store(&dir);
    std::fs::write(
        dir.join("node1-10-1-0.jsonl"),
        "{\"commtune_history\":1}\n{\"op\":",
    )
    .unwrap();
    let (output, stdout, stderr) = map(&["--dir", dir.to_str().unwrap(), "--op", "alltoall"]);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("ignored 1 line"), "{stderr}");
    assert!(stdout.contains("### alltoall: 40 problems"), "{stdout}");
    assert!(!stdout.contains("allreduce"), "{stdout}");
    assert!(
        stdout.contains("pmax 5.0 %  "),
        "the default windows\n{stdout}"
    );
    let (output, _, stderr) = map(&["--dir", dir.to_str().unwrap(), "--pmax", "150"]);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--pmax"), "{stderr}");
}

#[test]
fn a_later_store_is_predicted_from_the_earlier_one() {
    let dir = scratch("map_against");
    let (earlier, later) = (dir.join("earlier"), dir.join("later"));
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::create_dir_all(&later).unwrap();
    store(&earlier);
    // Sizes between the earlier ones: 12 B, 24 B, ... 3 MiB.
    let mut text = HEADER.to_string();
    for k in 2..=20 {
        text.push_str(&crossover("Open MPI v4.1.4", "allreduce", 4, 3 << k));
    }
    std::fs::write(later.join("node1-1-1-0.jsonl"), text).unwrap();
    let args = [
        "--dir",
        earlier.to_str().unwrap(),
        "--against",
        later.to_str().unwrap(),
    ];
    let (output, stdout, stderr) =
        map(&[&args[..], &["--op", "allreduce", "--pmax", "10"]].concat());
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!(
            "predicting the problems of the later store {}: 19 entries in 1 files",
            later.display()
        )),
        "{stdout}"
    );
    let open_mpi = section(&stdout, "## Open MPI v4.1.4 on node#").join("\n");
    let rows: Vec<&str> = open_mpi
        .lines()
        .skip_while(|l| *l != "prediction of the later store's problems:")
        .collect();
    let fit = rows
        .iter()
        .find(|l| l.starts_with("fit*"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let within: f64 = fit.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(within >= 90.0, "{stdout}");
    assert!(
        fit.contains(" / 100.0 / "),
        "every later problem predicted\n{stdout}"
    );
    // MPICH's section has no later problems to predict.
    let mpich = section(&stdout, "## MPICH Version: 4.0").join("\n");
    assert!(
        mpich
            .lines()
            .any(|l| l.starts_with("fit*") && l.ends_with(" 0.0 / 0.0 / 0.0 / 0.0")),
        "{stdout}"
    );
}
