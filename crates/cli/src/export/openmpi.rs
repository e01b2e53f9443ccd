//! Open MPI's `coll_tuned` dynamic rules file (the classic text format that Open MPI 4.1 and
//! 5.0 read, `ompi/mca/coll/tuned/coll_tuned_dynamic_file.c`): the number of collectives; per
//! collective its id, the number of communicator sizes; per size the size and the number of
//! message-size rules; per rule `message-size algorithm fan-in/out segment-size`. A rule holds
//! from its message size up to the next rule's; a communicator takes the rules of the largest
//! size listed that is not above its own (the first listed when all are); algorithm 0 leaves
//! the call to Open MPI's own decision. `#` starts a comment.

use super::{Range, Table, Unmapped};

/// The variables that make Open MPI read `file`.
pub fn usage(file: &str) -> String {
    format!("--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename {file}")
}

/// A collective as coll_tuned numbers it (`COLLTYPE` in coll_base_functions.h) and its
/// codelets' counterparts among the algorithms of `coll_tuned_<op>_algorithm` (as
/// `ompi_info --param coll tuned --level 9` lists them for Open MPI 4.1.4). `native` is 0,
/// "ignore": the rule defers to Open MPI's own decision.
struct Collective {
    op: &'static str,
    id: u32,
    algorithms: &'static [(&'static str, u32)],
}

const COLLECTIVES: [Collective; 3] = [
    Collective {
        op: "allgatherv",
        id: 1,
        algorithms: &[
            ("native", 0),
            // "default": MPI_Gatherv to rank 0, then MPI_Bcast, as commtune's linear.
            ("linear", 1),
            ("bruck", 2),
            ("ring", 3),
            ("neighbor_exchange", 4),
        ],
    },
    Collective {
        op: "allreduce",
        id: 2,
        algorithms: &[
            ("native", 0),
            // "basic_linear": linear reduce to rank 0, then a linear broadcast.
            ("linear", 1),
            ("nonoverlapping", 2),
            ("recursive_doubling", 3),
            ("ring", 4),
            ("rabenseifner", 6),
        ],
    },
    Collective {
        op: "alltoall",
        id: 3,
        algorithms: &[
            ("native", 0),
            ("linear", 1),
            ("pairwise", 2),
            // "modified_bruck"
            ("bruck", 3),
            // linear_sync2/4/8 have none: "linear_sync" takes its request limit from the
            // rule, which only 5.0's format (rule-file-version-2) gives, and 4.1 cannot read
            // that format.
        ],
    },
];

/// The message size coll_tuned compares for a call of commtune's `bytes` on `comm_size` ranks:
/// the whole vector (allreduce), everything a rank sends (alltoall), and for allgatherv the
/// average block, total / ranks, rounded up so that a range starts at the first call in it.
fn message_size(op: &str, bytes: u64, comm_size: u32) -> u64 {
    match op {
        "allgatherv" => bytes.div_ceil(u64::from(comm_size.max(1))),
        _ => bytes,
    }
}

/// A rule set that leaves every call to Open MPI's own decision.
const DEFER: &str = "1           # message sizes\n0 0 0 0     # Open MPI's own decision\n";

/// The rules file for `tables` (any order), with a comment per rule naming the codelet, and
/// the decisions it could not carry. Only the communicator sizes measured get rules: each is
/// followed by a size that defers to Open MPI (unless it is measured too), and size 0 comes
/// first, so that Open MPI's lookup (the largest size listed not above the communicator's)
/// finds a measured size only for exactly that size. `source`: the store; `note`: whose
/// decisions and which timing, and what was left out for them (`Selection::note`); `file`:
/// where the rules go (for the usage line).
pub fn rules(tables: &[Table], source: &str, note: &str, file: &str) -> (String, Vec<Unmapped>) {
    let mut unmapped = Vec::new();
    let mut body = String::new();
    let mut collectives = 0;
    for collective in &COLLECTIVES {
        let mut mine: Vec<&Table> = tables.iter().filter(|t| t.op == collective.op).collect();
        if mine.is_empty() {
            continue;
        }
        mine.sort_by_key(|t| t.comm_size);
        collectives += 1;
        let mut sets = vec![(0, DEFER.to_string())];
        for (i, table) in mine.iter().enumerate() {
            let mut set = format!("{:<12}# message sizes\n", table.ranges.len());
            for range in &table.ranges {
                set.push_str(&rule(collective, table, range, &mut unmapped));
            }
            sets.push((table.comm_size, set));
            let next = table.comm_size + 1;
            if mine.get(i + 1).is_none_or(|t| t.comm_size != next) {
                sets.push((next, DEFER.to_string()));
            }
        }
        body.push_str(&format!(
            "{:<12}# collective: {}\n{:<12}# communicator sizes\n",
            collective.id,
            collective.op,
            sets.len()
        ));
        for (comm_size, set) in sets {
            body.push_str(&format!("{comm_size:<12}# ranks\n{set}"));
        }
    }
    let text = format!(
        "# Open MPI coll_tuned dynamic rules written by `commtune export --format openmpi`\n\
         # from the history store {source}: its decisions of {note}.\n\
         # Use: mpirun {} ...\n\
         # Communicator sizes not measured keep Open MPI's own decisions.\n\
         # Rules: message size (bytes; allgatherv: per rank), algorithm, fan-in/out, segment size.\n\
         {collectives:<12}# collectives\n{body}",
        usage(file)
    );
    (text, unmapped)
}

/// One message-size rule line with its comment; a winner without counterpart defers to Open
/// MPI and is added to `unmapped`.
fn rule(
    collective: &Collective,
    table: &Table,
    range: &Range,
    unmapped: &mut Vec<Unmapped>,
) -> String {
    let algorithm = collective
        .algorithms
        .iter()
        .find(|(codelet, _)| *codelet == range.winner)
        .map(|(_, id)| *id);
    let size = message_size(collective.op, range.from, table.comm_size);
    let rule = format!("{size} {} 0 0", algorithm.unwrap_or(0));
    let note = match algorithm {
        Some(_) => {
            let measured: Vec<String> = range.measured.iter().map(u64::to_string).collect();
            format!(
                "{} (measured at {} bytes)",
                range.winner,
                measured.join(", ")
            )
        }
        None => {
            let why = Unmapped {
                op: collective.op.to_string(),
                comm_size: table.comm_size,
                from: range.from,
                winner: range.winner.clone(),
            };
            let line = why.line("Open MPI");
            unmapped.push(why);
            line
        }
    };
    format!("{rule:<12}# {note}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(from: u64, winner: &str, measured: u64) -> Range {
        Range {
            from,
            winner: winner.into(),
            measured: vec![measured],
        }
    }

    #[test]
    fn writes_ids_sizes_and_algorithms() {
        let tables = vec![
            Table {
                op: "allreduce".into(),
                comm_size: 4,
                ranges: vec![
                    range(0, "recursive_doubling", 8),
                    range(2897, "ring", 1 << 20),
                ],
            },
            Table {
                op: "allgatherv".into(),
                comm_size: 4,
                ranges: vec![range(0, "native", 64), range(181, "ring", 512)],
            },
        ];
        let (text, unmapped) = rules(&tables, "/h", "timed local", "/r");
        assert!(unmapped.is_empty());
        let numbers: Vec<&str> = text
            .lines()
            .map(|l| l.split('#').next().unwrap().trim())
            .filter(|l| !l.is_empty())
            .collect();
        // allgatherv (1) before allreduce (2); allgatherv's 181 bytes on 4 ranks: 46 per rank.
        // Sizes 0 and 5 defer to Open MPI: only 4 ranks take the rules.
        let expected = "2 | 1 | 3 | 0 | 1 | 0 0 0 0 | 4 | 2 | 0 0 0 0 | 46 3 0 0 | 5 | 1 | 0 0 0 0 \
                        | 2 | 3 | 0 | 1 | 0 0 0 0 | 4 | 2 | 0 3 0 0 | 2897 4 0 0 | 5 | 1 | 0 0 0 0";
        assert_eq!(numbers.join(" | "), expected);
        assert!(
            text.contains("# ring (measured at 1048576 bytes)"),
            "{text}"
        );
    }

    #[test]
    fn neighbouring_sizes_need_no_deferring_set_between() {
        let table = |comm_size| Table {
            op: "alltoall".into(),
            comm_size,
            ranges: vec![range(0, "bruck", 64)],
        };
        let (text, _) = rules(&[table(2), table(4), table(5)], "/h", "timed local", "/r");
        let sizes: Vec<&str> = text
            .lines()
            .filter(|l| l.ends_with("# ranks"))
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(sizes, ["0", "2", "3", "4", "5", "6"]);
        assert!(text.contains("6           # communicator sizes"), "{text}");
    }

    #[test]
    fn a_codelet_without_counterpart_defers_to_open_mpi() {
        let tables = vec![Table {
            op: "alltoall".into(),
            comm_size: 2,
            ranges: vec![range(0, "pairwise_excl", 64)],
        }];
        let (text, unmapped) = rules(&tables, "/h", "timed local", "/r");
        assert_eq!(unmapped.len(), 1);
        assert!(
            text.contains("0 0 0 0     # alltoall on 2 ranks from 0 bytes: pairwise_excl has no Open MPI counterpart; left to Open MPI's own choice"),
            "{text}"
        );
    }
}
