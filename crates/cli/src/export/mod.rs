//! `commtune export`: the history store's decisions as an MPI library's own selection rules
//! (Open MPI's `coll_tuned` dynamic rules file, MPICH's collective selection JSON file), so that
//! a job gets them without the preload library. This file owns what both formats share, with
//! no MPI and no I/O: which entries count (one MPI library version on one platform: a rules
//! file is for one installation on one machine type; one timing: estimates timed otherwise do
//! not compare), the winner per measured size, and the size ranges; `openmpi` and `mpich` make
//! the files' text (pure too), `command` reads and writes.

pub mod command;
pub mod mpich;
pub mod openmpi;

use std::collections::BTreeMap;
use std::fmt;

use commtune_history::Entry;
use commtune_history::predict;
use commtune_tune::Timing;

use crate::flavour::Flavour;

pub use commtune_history::OPERATIONS;

/// One operation at one communicator size: its winners over message sizes.
#[derive(Clone, PartialEq, Debug)]
pub struct Table {
    pub op: String,
    pub comm_size: u32,
    /// Ascending `from`; the first starts at 0 and the last runs to any size.
    pub ranges: Vec<Range>,
}

/// Calls of at least `from` bytes (commtune's bytes per call: the whole vector of an allreduce,
/// everything a rank receives in an alltoall or allgatherv), up to the next range, run `winner`.
#[derive(Clone, PartialEq, Debug)]
pub struct Range {
    pub from: u64,
    pub winner: String,
    /// The measured sizes that decided this range.
    pub measured: Vec<u64>,
}

/// One MPI library version on one platform: what a rules file is for. `commtune map` draws its
/// sections alike (and splits them by timing, which export chooses with `--timing`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct Group {
    /// The entry's `mpi`: `Open MPI v4.1.4`.
    pub mpi: String,
    /// As `commtune map` shows it: `node# (AMD EPYC 7763, transport shared memory)`.
    pub platform: String,
}

impl Group {
    fn of(entry: &Entry) -> Group {
        Group {
            mpi: entry.mpi.clone(),
            platform: entry.platform.to_string(),
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} on {}", self.mpi, self.platform)
    }
}

/// `--mpi` and `--platform`: any part of the names `commtune map` shows (and the error listing
/// the groups), ignoring case; None: any.
#[derive(Default, Debug)]
pub struct Choice {
    pub mpi: Option<String>,
    pub platform: Option<String>,
}

impl Choice {
    fn matches(&self, group: &Group) -> bool {
        let part_of = |text: &str, part: &Option<String>| {
            part.as_ref()
                .is_none_or(|p| text.to_lowercase().contains(&p.to_lowercase()))
        };
        part_of(&group.mpi, &self.mpi) && part_of(&group.platform, &self.platform)
    }

    /// `--mpi X --platform Y`, as given.
    fn options(&self) -> String {
        let given = [("--mpi", &self.mpi), ("--platform", &self.platform)];
        given
            .iter()
            .filter_map(|(option, value)| Some(format!("{option} {:?}", value.as_ref()?)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Why export chose no group: several had entries to export and the choice named none of them
/// alone. Each group with its entries of the requested timing.
#[derive(Debug)]
pub struct Unchosen {
    pub groups: Vec<(Group, usize)>,
    /// How many of `groups` the choice matched: 0, or more than one.
    pub matched: usize,
}

impl Unchosen {
    /// The error: what there is, and how to choose.
    pub fn message(&self, choice: &Choice, library: &str, timing: Timing) -> String {
        let what = format!(
            "{} MPI versions or platforms with {library} entries timed {}",
            self.groups.len(),
            timing.name()
        );
        let given = choice.options();
        let mut text = match self.matched {
            _ if given.is_empty() => format!(
                "the store has {what}, and a rules file is for one: choose it with --platform \
                 and/or --mpi (any part of its name below, as `commtune map` shows it)"
            ),
            0 => format!("{given} matches none of the {what}:"),
            n => format!("{given} matches {n} (marked *) of the {what}: name one"),
        };
        for (group, n) in &self.groups {
            let marked = !given.is_empty() && choice.matches(group);
            text.push_str(&format!(
                "\n  {}{group}: {}",
                if marked { "* " } else { "" },
                entries(*n)
            ));
        }
        text
    }
}

/// What the store held for one MPI library version, platform and timing.
#[derive(Debug)]
pub struct Selection {
    pub tables: Vec<Table>,
    /// The MPI library version and platform exported; None when no entry has the timing.
    pub group: Option<Group>,
    /// The timing of the entries exported.
    pub timing: Timing,
    /// The entries exported.
    pub exported: usize,
    /// Entries of the other MPI library (or of none), left out.
    pub other_mpi: usize,
    /// Entries of this library left out by `--comm-size`, of an unknown communicator size, or
    /// of an operation not exported.
    pub filtered: usize,
    /// Entries of this library that would have been exported but were of another version or
    /// platform, per group (any timing).
    pub other_groups: BTreeMap<Group, usize>,
    /// Entries of the group that would have been exported but were timed otherwise, per timing
    /// (`Entry::timing_name`).
    pub other_timings: BTreeMap<String, usize>,
}

/// `3 entries`, `1 entry`.
fn entries(n: usize) -> String {
    format!("{n} entr{}", if n == 1 { "y" } else { "ies" })
}

impl Selection {
    /// Which timing the export took and what it left out for it: `timed barrier; left out 3
    /// entries of other timings (local 2, unknown 1)`.
    pub fn timing_note(&self) -> String {
        let left_out: usize = self.other_timings.values().sum();
        let timing = self.timing.name();
        if left_out == 0 {
            return format!("timed {timing}; no entries of other timings");
        }
        let counts: Vec<String> = self
            .other_timings
            .iter()
            .map(|(timing, n)| format!("{timing} {n}"))
            .collect();
        format!(
            "timed {timing}; left out {} of other timings ({})",
            entries(left_out),
            counts.join(", ")
        )
    }

    /// What the export took and left out, for the file's comment and the command's output:
    /// `Open MPI v4.1.4 on node# (...), timed barrier; no entries of other timings; left out
    /// 5 entries of other MPI versions or platforms (Open MPI v4.1.4 on rig# (...) 5)`.
    pub fn note(&self) -> String {
        let mut note = match &self.group {
            Some(group) => format!("{group}, {}", self.timing_note()),
            None => self.timing_note(),
        };
        let left_out: usize = self.other_groups.values().sum();
        if left_out > 0 {
            let counts: Vec<String> = self
                .other_groups
                .iter()
                .map(|(group, n)| format!("{group} {n}"))
                .collect();
            note.push_str(&format!(
                "; left out {} of other MPI versions or platforms ({})",
                entries(left_out),
                counts.join(", ")
            ));
        }
        note
    }
}

/// Whether an entry's `mpi` string (the first line of MPI_Get_library_version, shortened:
/// `Open MPI v4.1.4`, `MPICH Version: 4.0.2`) names `flavour`.
pub fn measured_with(mpi: &str, flavour: Flavour) -> bool {
    match flavour {
        Flavour::OpenMpi => mpi.starts_with("Open MPI"),
        Flavour::Mpich => mpi.starts_with("MPICH"),
    }
}

/// The decisions of `flavour`'s entries of one MPI library version and platform, timed with
/// `timing`, per (operation, communicator size) in that order; `comm_sizes` empty: every size.
/// The version and platform: the one `choice` matches among those with entries of `timing`
/// (with no choice: the only one); an error when that is none or several (with no entries of
/// `timing` at all, a selection with no tables). Entries of unknown timing (format version 1)
/// are never taken: they may have been timed either way.
pub fn select(
    entries: &[Entry],
    flavour: Flavour,
    timing: Timing,
    comm_sizes: &[u32],
    choice: &Choice,
) -> Result<Selection, Unchosen> {
    let mut selection = Selection {
        tables: Vec::new(),
        group: None,
        timing,
        exported: 0,
        other_mpi: 0,
        filtered: 0,
        other_groups: BTreeMap::new(),
        other_timings: BTreeMap::new(),
    };
    let mut candidates = Vec::new();
    for entry in entries {
        if !measured_with(&entry.mpi, flavour) {
            selection.other_mpi += 1;
        } else if !OPERATIONS.contains(&entry.op.as_str())
            // 0: the library could not tell the size; no rule can name it.
            || entry.comm_size == 0
            || !(comm_sizes.is_empty() || comm_sizes.contains(&entry.comm_size))
        {
            selection.filtered += 1;
        } else {
            candidates.push((Group::of(entry), entry));
        }
    }
    let timed = |entry: &Entry| entry.timing.as_deref() == Some(timing.name());
    let mut groups: BTreeMap<&Group, usize> = BTreeMap::new();
    for (group, entry) in &candidates {
        if timed(entry) {
            *groups.entry(group).or_default() += 1;
        }
    }
    let matched: Vec<&Group> = groups
        .keys()
        .copied()
        .filter(|g| choice.matches(g))
        .collect();
    selection.group = match matched[..] {
        [group] => Some(group.clone()),
        _ if groups.is_empty() => None,
        _ => {
            return Err(Unchosen {
                groups: groups.into_iter().map(|(g, n)| (g.clone(), n)).collect(),
                matched: matched.len(),
            });
        }
    };
    let mut by_problem: BTreeMap<(&str, u32), BTreeMap<u64, Vec<&Entry>>> = BTreeMap::new();
    for (group, entry) in &candidates {
        let chosen = selection
            .group
            .as_ref()
            .map_or_else(|| choice.matches(group), |g| g == group);
        if !chosen {
            *selection.other_groups.entry(group.clone()).or_default() += 1;
        } else if !timed(entry) {
            *selection
                .other_timings
                .entry(entry.timing_name().to_string())
                .or_default() += 1;
        } else {
            selection.exported += 1;
            by_problem
                .entry((entry.op.as_str(), entry.comm_size))
                .or_default()
                .entry(entry.bytes)
                .or_default()
                .push(entry);
        }
    }
    selection.tables = by_problem
        .into_iter()
        .map(|((op, comm_size), sizes)| {
            let winners: Vec<(u64, String)> = sizes
                .into_iter()
                .map(|(bytes, entries)| (bytes, winner(&entries)))
                .collect();
            Table {
                op: op.to_string(),
                comm_size,
                ranges: ranges(&winners),
            }
        })
        .collect();
    Ok(selection)
}

/// The winner at one size: the entries' own when they agree (a search's decision weighs more
/// than its estimates: a codelet must beat native clearly to win); when jobs disagree, the
/// fastest of the problem the history merges them into (per codelet the median estimate).
fn winner(entries: &[&Entry]) -> String {
    let first = &entries[0].winner;
    if entries.iter().all(|e| &e.winner == first) {
        return first.clone();
    }
    let jobs: Vec<Entry> = entries.iter().map(|&e| e.clone()).collect();
    predict::merge(&jobs)
        .first()
        .map_or_else(|| first.clone(), |problem| problem.best().0.to_string())
}

/// Ranges from winners at ascending measured sizes: each size rules up to the geometric
/// midpoint between it and the next (costs grow with log size, so the midpoint in log size is
/// the fair border); neighbours with the same winner merge.
fn ranges(winners: &[(u64, String)]) -> Vec<Range> {
    let mut ranges: Vec<Range> = Vec::new();
    for (i, (bytes, winner)) in winners.iter().enumerate() {
        let from = match i {
            0 => 0,
            _ => geometric_midpoint(winners[i - 1].0, *bytes),
        };
        match ranges.last_mut() {
            Some(last) if &last.winner == winner => last.measured.push(*bytes),
            _ => ranges.push(Range {
                from,
                winner: winner.clone(),
                measured: vec![*bytes],
            }),
        }
    }
    ranges
}

/// The first size past the geometric mean of `a < b`: `a` rules below it, `b` from it.
fn geometric_midpoint(a: u64, b: u64) -> u64 {
    let mean = ((a as f64) * (b as f64)).sqrt().ceil() as u64;
    mean.clamp(a + 1, b)
}

/// A decision a rules file cannot carry: the range is left to the library's own choice.
#[derive(Clone, PartialEq, Debug)]
pub struct Unmapped {
    pub op: String,
    pub comm_size: u32,
    pub from: u64,
    pub winner: String,
}

impl Unmapped {
    /// The line for stderr and, after `# `, the rules file.
    pub fn line(&self, library: &str) -> String {
        format!(
            "{} on {} ranks from {} bytes: {} has no {library} counterpart; left to {library}'s own choice",
            self.op, self.comm_size, self.from, self.winner
        )
    }
}

#[cfg(test)]
pub(crate) mod tests;
