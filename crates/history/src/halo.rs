//! Halo decisions in the history store: what each rank's halo tuner decided for one of its
//! episodes, so that the same rank of a later run of the same program starts that episode in
//! production (LD_PRELOAD.md, "History").
//!
//! Halo entries live in files of their own, `<host>-<pid>-<nanoseconds>-<n>.halo`, with the
//! header `{"commtune_halo_history":1}`, written and read as the collective files are (whole,
//! renamed into place; merged on read; what is damaged skipped with one warning). Not in the
//! `.jsonl` files: a reader of collective decisions (this crate's `load`, `commtune map` and
//! `export`, and every commtune written before halo entries) then never sees one, so none can
//! mistake an episode's bytes for a collective's size, and the collective format keeps its
//! version.
//!
//! A halo decision is one rank's alone (halo codelets never change which messages match), so an
//! entry names its rank and is predicted only for the same rank of a job of the same size, for
//! an episode of exactly the same shape (`shape`): no distance, no vote.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Estimate, How, Kind, Loaded, Platform, Replaced};

/// The version of the halo files this crate writes and reads.
pub const VERSION: u32 = 1;

const HALO: Kind = Kind {
    suffix: ".halo",
    header: "commtune_halo_history",
    oldest: VERSION,
    version: VERSION,
};

/// What identifies one rank's halo episode across runs of a program.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Episode {
    /// MPI_COMM_WORLD's size and this rank in it.
    pub comm_size: u32,
    pub rank: u32,
    /// A hash (16 hex digits) of the episode's messages in posting order: send or receive, the
    /// peer relative to the rank in the message's communicator (`(peer - rank) mod size`) and
    /// its bytes. Tags and handles do not count: they name, they do not cost.
    pub shape: String,
    /// Messages in the episode, and their bytes together (exact).
    pub messages: u32,
    pub bytes: u64,
}

/// One rank's decided halo episode of one job.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct HaloEntry {
    #[serde(flatten)]
    pub episode: Episode,
    /// Ranks on this rank's host in MPI_COMM_WORLD, when the launcher says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks_per_node: Option<u32>,
    /// The size class of `bytes`, e.g. `24 KiB-32 KiB`.
    pub size_class: String,
    /// The episode's messages as the report shows them (with tags), for people.
    pub signature: String,
    pub mpi: String,
    pub platform: Platform,
    /// Every codelet the rank's search measured (this rank's estimates, µs).
    pub estimates: Vec<Estimate>,
    /// How the estimates were timed (`local`, `barrier`, `period`).
    pub timing: String,
    /// The timing the job asked for when `timing` is another (as in collective entries,
    /// `crate::Entry::reopened_from`): the rank's self-check found the search of the asked
    /// timing misled and searched again with this one. Older readers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopened_from: Option<String>,
    /// The winner's realised production time per episode (µs), when the job measured it (the
    /// runner-up's trial, when it replaced the search's winner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realised_us: Option<f64>,
    pub winner: String,
    /// The search's winner that the self-check replaced with `winner`, its runner-up (as in
    /// collective entries: `estimates` corrected, see `Replaced`). Older readers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<Replaced>,
    /// Seconds since 1970 (UTC) when the job wrote the entry.
    pub time: u64,
    pub how: How,
}

impl HaloEntry {
    /// The time per episode a later run's winner should take: the realised production time
    /// where the job measured it (what the safety net measures too), else the winner's
    /// estimate. None when neither is a usable time.
    pub fn predicted_us(&self) -> Option<f64> {
        let estimate = || self.winner_estimate().map(|e| e.us);
        self.realised_us
            .or_else(estimate)
            .filter(|us| us.is_finite() && *us > 0.0)
    }

    /// The winner's estimate, if the search measured it.
    pub fn winner_estimate(&self) -> Option<&Estimate> {
        crate::winner_estimate(&self.estimates, &self.winner)
    }
}

/// The hash of an episode's messages (`Episode::shape`): `(is_send, relative_peer, bytes)`
/// each, in posting order. FNV-1a: the same on every machine and in every run.
pub fn shape(messages: impl IntoIterator<Item = (bool, u32, u64)>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (send, peer, bytes) in messages {
        eat(&[u8::from(send)]);
        eat(&peer.to_le_bytes());
        eat(&bytes.to_le_bytes());
    }
    format!("{hash:016x}")
}

/// Writes `entries` as the new halo file of `dir` for the job whose collective file is named
/// `name` (`crate::file_name`): the same stem, `.halo`.
pub fn write(dir: &Path, name: &str, entries: &[HaloEntry]) -> std::io::Result<PathBuf> {
    let stem = name.strip_suffix(".jsonl").unwrap_or(name);
    crate::write_kind(&HALO, dir, &format!("{stem}{}", HALO.suffix), entries)
}

/// Every halo entry of `dir` (see `crate::load`).
pub fn load(dir: &Path) -> Loaded<HaloEntry> {
    crate::load_kind(&HALO, dir)
}

/// The entries of `entries` measured with the MPI library `mpi` on `platform` for a job timed
/// with `timing`, the newest per episode (the last of a tie in the order given: file name order
/// from `load`, the same on every rank that reads the same files), with a usable time.
///
/// An episode this timing measured nothing of is predicted by the newest decision a job of this
/// timing reached with the other one (`reopened_from`) at its realised time: the self-check
/// found this timing's search misled there, so searching with it again would be misled again.
/// The entry keeps its timing, which the prediction then measures with.
pub fn latest(
    entries: Vec<HaloEntry>,
    mpi: &str,
    platform: &Platform,
    timing: &str,
) -> HashMap<Episode, HaloEntry> {
    let mut latest: HashMap<Episode, HaloEntry> = HashMap::new();
    let mut elsewhere: HashMap<Episode, HaloEntry> = HashMap::new();
    for entry in entries {
        if entry.mpi != mpi || entry.platform != *platform || entry.predicted_us().is_none() {
            continue;
        }
        let held = if entry.timing == timing {
            &mut latest
        } else if entry.reopened_from.as_deref() == Some(timing) && entry.realised_us.is_some() {
            &mut elsewhere
        } else {
            continue;
        };
        match held.get(&entry.episode) {
            Some(newer) if newer.time > entry.time => {}
            _ => {
                held.insert(entry.episode.clone(), entry);
            }
        }
    }
    for (episode, entry) in elsewhere {
        latest.entry(episode).or_insert(entry);
    }
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform() -> Platform {
        Platform {
            host: "node#".into(),
            cpu: "cpu".into(),
            transport: "shared memory".into(),
        }
    }

    fn entry(rank: u32, winner: &str, time: u64) -> HaloEntry {
        HaloEntry {
            episode: Episode {
                comm_size: 2,
                rank,
                shape: shape([(false, 1, 800), (true, 1, 800)]),
                messages: 2,
                bytes: 1600,
            },
            ranks_per_node: Some(2),
            size_class: "1.5 KiB-2 KiB".into(),
            signature: "1 sends, 1 recvs: ...".into(),
            mpi: "Open MPI v4.1.4".into(),
            platform: platform(),
            estimates: vec![
                Estimate {
                    codelet: "native".into(),
                    us: 20.0,
                    error_us: 1.0,
                },
                Estimate {
                    codelet: "pairwise".into(),
                    us: 10.0,
                    error_us: 1.0,
                },
            ],
            timing: "local".into(),
            reopened_from: None,
            realised_us: None,
            winner: winner.into(),
            replaced: None,
            time,
            how: How::Search,
        }
    }

    #[test]
    fn shapes_tell_order_direction_peers_and_bytes_apart() {
        let base = shape([(false, 1, 800), (true, 1, 800)]);
        assert_eq!(base, shape([(false, 1, 800), (true, 1, 800)]));
        assert_eq!(base.len(), 16);
        for other in [
            shape([(true, 1, 800), (false, 1, 800)]),
            shape([(false, 3, 800), (true, 1, 800)]),
            shape([(false, 1, 808), (true, 1, 800)]),
            shape([(false, 1, 800)]),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn the_prediction_is_the_realised_time_else_the_winners_estimate() {
        let mut e = entry(0, "pairwise", 1);
        assert_eq!(e.predicted_us(), Some(10.0));
        e.realised_us = Some(12.5);
        assert_eq!(e.predicted_us(), Some(12.5));
        e.winner = "pack".into();
        e.realised_us = None;
        assert_eq!(e.predicted_us(), None, "a winner the search did not time");
    }

    #[test]
    fn latest_keeps_the_newest_compatible_entry_per_rank_and_episode() {
        let mut foreign = entry(0, "native", 9);
        foreign.platform.cpu = "other".into();
        let mut period = entry(0, "native", 9);
        period.timing = "period".into();
        let entries = vec![
            entry(0, "native", 1),
            entry(0, "pairwise", 2),
            entry(1, "native", 3),
            foreign,
            period,
        ];
        let latest = latest(entries, "Open MPI v4.1.4", &platform(), "local");
        assert_eq!(latest.len(), 2, "one per rank");
        let of = |rank| {
            let key = Episode {
                rank,
                ..entry(rank, "", 0).episode
            };
            latest[&key].winner.clone()
        };
        assert_eq!((of(0).as_str(), of(1).as_str()), ("pairwise", "native"));
    }

    #[test]
    fn a_decision_reopened_with_the_other_timing_predicts_where_this_timing_measured_nothing() {
        let reopened = |rank, winner: &str, time, realised_us| HaloEntry {
            timing: "period".into(),
            reopened_from: Some("local".into()),
            realised_us,
            ..entry(rank, winner, time)
        };
        let entries = vec![
            // Rank 0: this timing measured the episode, and its older entry still wins.
            entry(0, "native", 1),
            reopened(0, "pairwise", 5, Some(30.0)),
            // Rank 1: only the other timing's decision, the newest of two.
            reopened(1, "native", 2, Some(20.0)),
            reopened(1, "pairwise", 3, Some(25.0)),
            // Rank 2: reopened, but its production time was never measured.
            reopened(2, "pairwise", 4, None),
        ];
        let local = latest(entries.clone(), "Open MPI v4.1.4", &platform(), "local");
        let of = |rank| {
            local
                .get(&entry(rank, "", 0).episode)
                .map(|e| (e.winner.as_str(), e.timing.as_str()))
        };
        assert_eq!(of(0), Some(("native", "local")));
        assert_eq!(of(1), Some(("pairwise", "period")));
        assert_eq!(of(2), None);
        let barrier = latest(entries, "Open MPI v4.1.4", &platform(), "barrier");
        assert!(barrier.is_empty(), "not reopened from barrier: {barrier:?}");
    }

    #[test]
    fn halo_files_are_invisible_to_collective_readers_and_read_back() {
        let dir = std::env::temp_dir().join(format!("commtune-halo-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let name = crate::file_name("node1", 7, 1);
        let entries = vec![entry(0, "pairwise", 1), entry(1, "native", 1)];
        let path = write(&dir, &name, &entries).unwrap();
        assert!(path.to_string_lossy().ends_with(".halo"));
        let collectives = crate::load(&dir);
        assert_eq!(
            (
                collectives.entries.len(),
                collectives.files,
                collectives.skipped_files
            ),
            (0, 0, 0)
        );
        assert!(collectives.warning(&dir).is_none(), "nothing to warn about");
        let halo = load(&dir);
        assert_eq!(halo.entries, entries);
        assert!(halo.warning(&dir).is_none());
        // A collective file renamed to look like a halo file is refused whole, with a warning.
        crate::write(&dir, "job.jsonl", &[]).unwrap();
        std::fs::rename(dir.join("job.jsonl"), dir.join("job.halo")).unwrap();
        let halo = load(&dir);
        assert_eq!((halo.entries.len(), halo.skipped_files), (2, 1));
        assert!(halo.warning(&dir).unwrap().contains("no version line"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
