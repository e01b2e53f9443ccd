//! `commtune history`: the entries of the history store (what earlier jobs' searches decided),
//! one line each: the collectives', then the halo episodes' (each rank's own).

use std::path::{Path, PathBuf};

use commtune_history::halo::HaloEntry;
use commtune_history::{self as history, Entry, Estimate, How, Loaded, Replaced};

/// The store to read: `--dir`, else COMMTUNE_HISTORY (unless `off`), else the library's default.
pub fn dir(explicit: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(dir) = explicit {
        return Ok(dir);
    }
    match std::env::var("COMMTUNE_HISTORY") {
        // As the library reads it (src/config.rs): no trimming.
        Ok(v) if v == "off" => {
            return Err("COMMTUNE_HISTORY=off: no store (give one with --dir)".to_string());
        }
        Ok(v) if !v.is_empty() => return Ok(PathBuf::from(v)),
        _ => {}
    }
    history::default_dir(|name| std::env::var(name).ok())
        .ok_or_else(|| "neither XDG_STATE_HOME nor HOME is set: give the store with --dir".into())
}

/// The listing: a heading line, then the entries by operation, communicator size, bytes and date.
pub fn text(dir: &Path, loaded: &Loaded) -> String {
    let mut out = format!(
        "history {}: {} entries in {} files\n",
        dir.display(),
        loaded.entries.len(),
        loaded.files
    );
    if loaded.entries.is_empty() {
        return out;
    }
    let mut entries: Vec<&Entry> = loaded.entries.iter().collect();
    entries.sort_by(|a, b| {
        (&a.op, a.comm_size, a.bytes, a.time).cmp(&(&b.op, b.comm_size, b.bytes, b.time))
    });
    let rows: Vec<[String; 11]> = entries
        .iter()
        .map(|e| {
            [
                history::date(e.time),
                e.op.clone(),
                e.comm_size.to_string(),
                e.ranks_per_node
                    .map_or_else(|| "-".to_string(), |r| r.to_string()),
                e.size_class.clone(),
                e.bytes.to_string(),
                e.winner.clone(),
                how(e.how, e.replaced.as_ref()),
                e.timing.clone().unwrap_or_else(|| "-".to_string()),
                e.realised_us
                    .map_or_else(|| "-".to_string(), |us| format!("{us:.1}")),
                estimates(e),
            ]
        })
        .collect();
    let heading = [
        "date (UTC)",
        "op",
        "ranks",
        "per node",
        "size class",
        "bytes",
        "winner",
        "how",
        "timing",
        "realised (us)",
        "estimates (us)",
    ];
    out.push_str(&table(heading, &rows));
    out
}

/// The halo entries of the store `dir` (what it had to skip: one warning line on stderr), by
/// ranks, rank, bytes and date; nothing when it has none.
pub fn halo_text(dir: &Path) -> String {
    let loaded = history::halo::load(dir);
    if let Some(warning) = loaded.warning(dir).filter(|_| !loaded.unreadable()) {
        eprintln!("{warning}");
    }
    if loaded.entries.is_empty() {
        return String::new();
    }
    let mut entries: Vec<&HaloEntry> = loaded.entries.iter().collect();
    entries.sort_by_key(|e| {
        let episode = &e.episode;
        (
            episode.comm_size,
            episode.rank,
            episode.bytes,
            &episode.shape,
            e.time,
        )
    });
    let rows: Vec<[String; 13]> = entries
        .iter()
        .map(|e| {
            [
                history::date(e.time),
                e.episode.comm_size.to_string(),
                e.episode.rank.to_string(),
                e.ranks_per_node
                    .map_or_else(|| "-".to_string(), |r| r.to_string()),
                e.episode.messages.to_string(),
                e.size_class.clone(),
                e.episode.bytes.to_string(),
                e.episode.shape.clone(),
                e.winner.clone(),
                how(e.how, e.replaced.as_ref()),
                e.timing.clone(),
                e.realised_us
                    .map_or_else(|| "-".to_string(), |us| format!("{us:.1}")),
                listed(&e.estimates),
            ]
        })
        .collect();
    let heading = [
        "date (UTC)",
        "ranks",
        "rank",
        "per node",
        "messages",
        "size class",
        "bytes",
        "shape",
        "winner",
        "how",
        "timing",
        "realised (us)",
        "estimates (us)",
    ];
    format!(
        "halo episodes: {} entries in {} files\n{}",
        loaded.entries.len(),
        loaded.files,
        table(heading, &rows)
    )
}

/// `rows` under `heading`, each column as wide as its widest cell.
fn table<const N: usize>(heading: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = heading.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(&heading.map(String::from));
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

/// How the winner was found, and the search's winner the self-check replaced with it:
/// `search, over native`.
fn how(how: How, replaced: Option<&Replaced>) -> String {
    match replaced {
        Some(replaced) => format!("{}, over {}", how.name(), replaced.codelet),
        None => how.name().to_string(),
    }
}

/// Every codelet's estimate; for a calibration's ping-pong (`p2p`), the one-way time and the
/// bandwidth it makes.
fn estimates(entry: &Entry) -> String {
    match (entry.op.as_str(), entry.estimates.as_slice()) {
        (history::PING_PONG, [one_way]) => format!(
            "one-way={:.1}±{:.1} ({:.0} MB/s)",
            one_way.us,
            one_way.error_us,
            entry.bytes as f64 / one_way.us
        ),
        _ => listed(&entry.estimates),
    }
}

/// `native=312.2±1.0 ring=12.0±0.5`.
fn listed(estimates: &[Estimate]) -> String {
    estimates
        .iter()
        .map(|c| format!("{}={:.1}±{:.1}", c.codelet, c.us, c.error_us))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The store `dir`, merged; what it had to skip is one warning line on stderr.
pub fn load(dir: &Path) -> Loaded {
    let loaded = history::load(dir);
    if let Some(warning) = loaded.warning(dir) {
        eprintln!("{warning}");
    }
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;
    use commtune_history::Platform;

    #[test]
    fn lists_a_ping_pong_as_one_way_time_and_bandwidth() {
        let mut entry = entry();
        entry.op = "p2p".into();
        entry.bytes = 1_000_000;
        entry.estimates.truncate(1);
        entry.estimates[0].us = 500.0;
        assert_eq!(estimates(&entry), "one-way=500.0±1.0 (2000 MB/s)");
    }

    fn entry() -> Entry {
        Entry {
            op: "allreduce".into(),
            comm_size: 4,
            ranks_per_node: Some(4),
            size_class: "64 B-96 B".into(),
            bytes: 64,
            signature: "count=8 datatype=MPI_DOUBLE op=MPI_SUM comm_size=4".into(),
            facts: "size=4".into(),
            mpi: "Open MPI".into(),
            platform: Platform {
                host: "node#".into(),
                cpu: "cpu".into(),
                transport: "unknown".into(),
            },
            estimates: vec![
                Estimate {
                    codelet: "native".into(),
                    us: 312.25,
                    error_us: 1.0,
                },
                Estimate {
                    codelet: "ring".into(),
                    us: 12.0,
                    error_us: 0.5,
                },
            ],
            timing: Some("local".into()),
            reopened_from: None,
            realised_us: None,
            winner: "ring".into(),
            replaced: None,
            time: 0,
            how: How::Search,
        }
    }

    #[test]
    fn lists_halo_entries_by_rank_after_the_collectives() {
        let dir = std::env::temp_dir().join(format!("commtune-cli-halo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(halo_text(&dir), "", "no halo entries, no section");
        let e = entry();
        let halo = |rank| HaloEntry {
            episode: history::halo::Episode {
                comm_size: 2,
                rank,
                shape: "0123456789abcdef".into(),
                messages: 8,
                bytes: 896,
            },
            ranks_per_node: Some(2),
            size_class: "768 B-1 KiB".into(),
            signature: String::new(),
            mpi: e.mpi.clone(),
            platform: e.platform.clone(),
            estimates: e.estimates.clone(),
            timing: "local".into(),
            reopened_from: None,
            realised_us: Some(13.5),
            winner: "ring".into(),
            replaced: None,
            time: 0,
            how: How::Search,
        };
        history::halo::write(&dir, "job.jsonl", &[halo(1), halo(0)]).unwrap();
        let text = halo_text(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "halo episodes: 2 entries in 1 files");
        assert!(
            lines[1].starts_with("date (UTC)        ranks  rank  "),
            "{text}"
        );
        assert!(
            lines[2].starts_with("1970-01-01 00:00  2      0     2         8         768 B-1 KiB  896    0123456789abcdef  ring    search  local   13.5           native=312.2±1.0 ring=12.0±0.5"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("1970-01-01 00:00  2      1  "),
            "{text}"
        );
    }

    #[test]
    fn lists_winner_and_estimates() {
        let mut measured = entry();
        measured.realised_us = Some(13.5);
        let mut replaced = measured.clone();
        replaced.bytes = 128;
        replaced.replaced = Some(Replaced {
            codelet: "native".into(),
            realised_us: 20.0,
        });
        let loaded = Loaded {
            entries: vec![measured, replaced],
            files: 1,
            ..Loaded::default()
        };
        let text = text(Path::new("/h"), &loaded);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "history /h: 2 entries in 1 files");
        assert!(lines[1].starts_with("date (UTC)        op  "), "{text}");
        assert!(
            lines[2].starts_with("1970-01-01 00:00  allreduce  4      4         64 B-96 B   64     ring    search               local   13.5           native=312.2±1.0 ring=12.0±0.5"),
            "{text}"
        );
        assert!(
            lines[3].contains(" 128    ring    search, over native  local "),
            "the winner the self-check replaced: {text}"
        );
    }
}
