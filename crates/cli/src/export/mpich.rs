//! MPICH's collective selection file (`MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE`, read by
//! `src/mpi/coll/src/csel.c` of MPICH 4): a JSON tree whose keys are tests (`collective=allreduce`,
//! `comm_size<=4`, `avg_msg_size<1024`, ...), tried in order, down to `algorithm=MPIR_...` leaves.
//! The file replaces MPICH's built-in tree whole (a collective missing from it fails an
//! assertion), so the export starts from the built-in tree of the installed library, copied
//! verbatim, and replaces only the intra-communicator subtree of each exported collective: for
//! each exported communicator size exactly (`comm_size<N` → the built-in subtree,
//! `comm_size<=N` → the decisions), then the built-in subtree for every other size. Keys keep
//! their order (json-c keeps it; the tree depends on it), so this works on the text.

use std::collections::BTreeSet;
use std::ops::Range as Span;

use super::{Table, Unmapped};

/// The variable that makes MPICH read the file it names.
pub const VARIABLE: &str = "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE";

/// What MPICH requires of a call for an algorithm (`restrictions:` in its
/// `coll_algorithms.txt`); MPICH checks them only when its variable forces an algorithm, not
/// when a selection file picks it, so the exported tree tests them.
#[derive(Clone, Copy)]
enum Restriction {
    None,
    /// size-ge-pof2, builtin-op
    BuiltinOpCountAtLeastPowerOfTwo,
    /// power-of-two
    PowerOfTwoSize,
}

/// The codelets' counterparts among MPICH's MPIR-level algorithms (MPICH 4.0.2's
/// `coll_algorithms.txt`; `mpivars` lists them per collective; ring allreduce came with 4.1).
/// MPI_IN_PLACE alltoalls and non-commutative allreduces never reach them (`guards`).
const COUNTERPARTS: [(&str, &str, &str, Restriction); 9] = [
    (
        "allreduce",
        "recursive_doubling",
        "Allreduce_intra_recursive_doubling",
        Restriction::None,
    ),
    (
        "allreduce",
        "rabenseifner",
        "Allreduce_intra_reduce_scatter_allgather",
        Restriction::BuiltinOpCountAtLeastPowerOfTwo,
    ),
    (
        "allreduce",
        "ring",
        "Allreduce_intra_ring",
        Restriction::None,
    ),
    (
        "alltoall",
        "bruck",
        "Alltoall_intra_brucks",
        Restriction::None,
    ),
    (
        "alltoall",
        "pairwise",
        "Alltoall_intra_pairwise",
        Restriction::None,
    ),
    // "scattered" posts every receive and send at once in batches of
    // MPIR_CVAR_ALLTOALL_THROTTLE (32) peers: commtune's linear up to 32 ranks.
    (
        "alltoall",
        "linear",
        "Alltoall_intra_scattered",
        Restriction::None,
    ),
    (
        "allgatherv",
        "bruck",
        "Allgatherv_intra_brucks",
        Restriction::None,
    ),
    (
        "allgatherv",
        "ring",
        "Allgatherv_intra_ring",
        Restriction::None,
    ),
    (
        "allgatherv",
        "recursive_doubling",
        "Allgatherv_intra_recursive_doubling",
        Restriction::PowerOfTwoSize,
    ),
];

/// The subtree that runs `codelet` (`builtin`: MPICH's own choice), if MPICH has a counterpart
/// and `known` says this library has it (MPICH fails at start-up on a name it does not know).
fn algorithm(
    op: &str,
    codelet: &str,
    builtin: &str,
    known: &dyn Fn(&str) -> bool,
) -> Option<String> {
    if codelet == "native" {
        return Some(builtin.to_string());
    }
    let (_, _, name, restriction) = COUNTERPARTS
        .iter()
        .find(|(o, c, _, _)| *o == op && *c == codelet)?;
    let name = format!("MPIR_{name}");
    if !known(&name) {
        return None;
    }
    let leaf = format!("{{\"algorithm={name}\":{{}}}}");
    Some(match restriction {
        Restriction::None => leaf,
        Restriction::BuiltinOpCountAtLeastPowerOfTwo => format!(
            "{{\"is_op_built_in=no\":{builtin},\"count<pow2\":{builtin},\"count=any\":{leaf}}}"
        ),
        Restriction::PowerOfTwoSize => {
            format!("{{\"comm_size=pow2\":{leaf},\"comm_size=any\":{builtin}}}")
        }
    })
}

/// What the tree compares for a call of commtune's `bytes` on `comm_size` ranks, and the value
/// for a range starting at `bytes`: allreduce's vector (`avg_msg_size`), alltoall's block per
/// peer (`avg_msg_size`, rounded up so that a range starts at the first call in it), and
/// allgatherv's whole result (`total_msg_size`); at most i32::MAX.
fn measure(op: &str, bytes: u64, comm_size: u32) -> (&'static str, u64) {
    // MPICH reads the number with atoi: past i32::MAX it would wrap.
    let (name, value) = match op {
        "alltoall" => ("avg_msg_size", bytes.div_ceil(u64::from(comm_size.max(1)))),
        "allgatherv" => ("total_msg_size", bytes),
        _ => ("avg_msg_size", bytes),
    };
    (name, value.min(i32::MAX as u64))
}

/// Tests that send a call to the built-in choice before any decision applies: MPI_IN_PLACE
/// alltoalls (no exported algorithm takes them) and non-commutative reductions (commtune's
/// allreduce codelets other than native need commutativity).
fn guards(op: &str, builtin: &str) -> String {
    match op {
        "alltoall" => format!("\"is_sendbuf_inplace=yes\":{builtin},"),
        "allreduce" => format!("\"is_commutative=no\":{builtin},"),
        _ => String::new(),
    }
}

/// The selection file: `builtin` (MPICH's own tree, see `builtin_tree`) with the decisions of
/// `tables` in place; and the decisions it could not carry. `known`: whether the library has an
/// algorithm (`MPIR_Allreduce_intra_ring`; see `algorithms`). Errors when the built-in tree
/// lacks an exported collective's intra-communicator subtree.
pub fn selection(
    tables: &[Table],
    builtin: &str,
    known: &dyn Fn(&str) -> bool,
) -> Result<(String, Vec<Unmapped>), String> {
    let mut unmapped = Vec::new();
    let mut edits: Vec<(Span<usize>, String)> = Vec::new();
    for op in super::OPERATIONS {
        let mut mine: Vec<&Table> = tables.iter().filter(|t| t.op == op).collect();
        if mine.is_empty() {
            continue;
        }
        mine.sort_by_key(|t| t.comm_size);
        let missing = || format!("MPICH's built-in selection tree has no {op} intra subtree");
        let collective = value_span(builtin, 0..builtin.len(), &format!("collective={op}"))
            .ok_or_else(missing)?;
        let intra = value_span(builtin, collective, "comm_type=intra").ok_or_else(missing)?;
        let default = &builtin[intra.clone()];
        let mut chain = Vec::new();
        for table in mine {
            let n = table.comm_size;
            let mut sizes = Vec::new();
            for (i, range) in table.ranges.iter().enumerate() {
                let node = algorithm(op, &range.winner, default, known).unwrap_or_else(|| {
                    unmapped.push(Unmapped {
                        op: op.to_string(),
                        comm_size: n,
                        from: range.from,
                        winner: range.winner.clone(),
                    });
                    default.to_string()
                });
                let (name, _) = measure(op, 0, n);
                let test = match table.ranges.get(i + 1) {
                    Some(next) => format!("{name}<{}", measure(op, next.from, n).1),
                    None => format!("{name}=any"),
                };
                sizes.push(format!("\"{test}\":{node}"));
            }
            chain.push(format!(
                "\"comm_size<{n}\":{default},\"comm_size<={n}\":{{{}{}}}",
                guards(op, default),
                sizes.join(",")
            ));
        }
        chain.push(format!("\"comm_size=any\":{default}"));
        edits.push((intra, format!("{{{}}}", chain.join(","))));
    }
    let mut text = builtin.to_string();
    edits.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
    for (span, replacement) in edits {
        text.replace_range(span, &replacement);
    }
    text.push('\n');
    Ok((text, unmapped))
}

/// MPICH's built-in MPIR-level selection tree, as the library holds it (a NUL-terminated JSON
/// string in its read-only data, `MPII_coll_generic_json`); the device levels have trees of
/// their own, told apart by their `composition=`/`MPIDI_` leaves.
pub fn builtin_tree(library: &[u8]) -> Option<String> {
    library
        .split(|b| *b == 0)
        .filter(|chunk| chunk.starts_with(b"{\"collective="))
        .filter_map(|chunk| std::str::from_utf8(chunk).ok())
        .find(|text| text.contains("\"algorithm=MPIR_") && !text.contains("MPIDI_"))
        .map(str::to_string)
}

/// The MPIR-level algorithms a library has: the names its selection code compares
/// (NUL-terminated strings `MPIR_<Collective>_<intra|inter>_<name>` in its read-only data).
pub fn algorithms(library: &[u8]) -> BTreeSet<String> {
    library
        .split(|b| *b == 0)
        .filter(|chunk| chunk.starts_with(b"MPIR_") && chunk.len() < 80)
        .filter_map(|chunk| std::str::from_utf8(chunk).ok())
        .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect()
}

/// The span of the object value of the first `"key":` inside `within`.
fn value_span(text: &str, within: Span<usize>, key: &str) -> Option<Span<usize>> {
    let quoted = format!("\"{key}\"");
    let start = within.start + text[within.clone()].find(&quoted)? + quoted.len();
    let rest = &text[start..within.end];
    let colon = rest.find(|c: char| !c.is_whitespace())?;
    if !rest[colon..].starts_with(':') {
        return None;
    }
    let open = colon + 1 + rest[colon + 1..].find(|c: char| !c.is_whitespace())?;
    if !rest[open..].starts_with('{') {
        return None;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in rest[open..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' if !in_string => depth += 1,
            '}' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return Some(start + open..start + open + i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::Range;

    const BUILTIN: &str = r#"{"collective=bcast":{"comm_type=intra":{"algorithm=MPIR_Bcast_intra_binomial":{}}},"collective=allreduce":{"comm_type=intra":{"avg_msg_size<=8":{"algorithm=MPIR_Allreduce_intra_recursive_doubling":{}},"avg_msg_size=any":{"algorithm=MPIR_Allreduce_intra_reduce_scatter_allgather":{}}},"comm_type=inter":{"algorithm=MPIR_Allreduce_inter_reduce_exchange_bcast":{}}}}"#;
    const DEFAULT: &str = r#"{"avg_msg_size<=8":{"algorithm=MPIR_Allreduce_intra_recursive_doubling":{}},"avg_msg_size=any":{"algorithm=MPIR_Allreduce_intra_reduce_scatter_allgather":{}}}"#;

    #[test]
    fn replaces_the_intra_subtree_for_the_exported_size_only() {
        let tables = vec![Table {
            op: "allreduce".into(),
            comm_size: 4,
            ranges: vec![
                Range {
                    from: 0,
                    winner: "native".into(),
                    measured: vec![8],
                },
                Range {
                    from: 91,
                    winner: "recursive_doubling".into(),
                    measured: vec![1024],
                },
            ],
        }];
        let (text, unmapped) = selection(&tables, BUILTIN, &|_| true).expect("exports");
        assert!(unmapped.is_empty());
        let intra = format!(
            r#"{{"comm_size<4":{DEFAULT},"comm_size<=4":{{"is_commutative=no":{DEFAULT},"avg_msg_size<91":{DEFAULT},"avg_msg_size=any":{{"algorithm=MPIR_Allreduce_intra_recursive_doubling":{{}}}}}},"comm_size=any":{DEFAULT}}}"#
        );
        let expected = BUILTIN.replacen(DEFAULT, &intra, 1);
        assert_eq!(text.trim_end(), expected);
        // Still JSON, and the other collectives are untouched.
        let parsed: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert!(parsed["collective=bcast"].is_object());
    }

    #[test]
    fn each_exported_size_exactly_and_in_place_alltoalls_keep_the_builtin_choice() {
        let builtin = r#"{"collective=alltoall":{"comm_type=intra":{"algorithm=MPIR_Alltoall_intra_scattered":{}}}}"#;
        let default = r#"{"algorithm=MPIR_Alltoall_intra_scattered":{}}"#;
        let table = |comm_size| Table {
            op: "alltoall".into(),
            comm_size,
            ranges: vec![
                Range {
                    from: 0,
                    winner: "native".into(),
                    measured: vec![64],
                },
                Range {
                    from: 1000,
                    winner: "bruck".into(),
                    measured: vec![4096],
                },
            ],
        };
        let (text, _) = selection(&[table(4), table(2)], builtin, &|_| true).expect("exports");
        let bruck = r#"{"algorithm=MPIR_Alltoall_intra_brucks":{}}"#;
        // 1000 bytes on 2 ranks: 500 per peer; on 4 ranks: 250.
        let sizes = |n: u32, per_peer: u32| {
            format!(
                r#""comm_size<{n}":{default},"comm_size<={n}":{{"is_sendbuf_inplace=yes":{default},"avg_msg_size<{per_peer}":{default},"avg_msg_size=any":{bruck}}}"#
            )
        };
        let intra = format!(
            r#"{{{},{},"comm_size=any":{default}}}"#,
            sizes(2, 500),
            sizes(4, 250)
        );
        assert_eq!(text.trim_end(), builtin.replacen(default, &intra, 1));
    }

    #[test]
    fn unmapped_winners_keep_the_builtin_choice() {
        let table = |winner: &str| Table {
            op: "allreduce".into(),
            comm_size: 2,
            ranges: vec![Range {
                from: 0,
                winner: winner.into(),
                measured: vec![64],
            }],
        };
        let kept = format!(r#""avg_msg_size=any":{DEFAULT}"#);
        let keeps_builtin = |winner: &str, known: &dyn Fn(&str) -> bool| {
            let (text, unmapped) = selection(&[table(winner)], BUILTIN, known).expect("exports");
            assert_eq!(unmapped.len(), 1, "{winner}");
            assert!(text.contains(&kept), "{text}");
        };
        keeps_builtin("binomial", &|_| true);
        // MPICH before 4.1 has no ring allreduce.
        keeps_builtin("ring", &|name| name != "MPIR_Allreduce_intra_ring");
        let (text, unmapped) = selection(&[table("ring")], BUILTIN, &|_| true).expect("exports");
        assert!(unmapped.is_empty());
        assert!(
            text.contains(r#""avg_msg_size=any":{"algorithm=MPIR_Allreduce_intra_ring":{}}"#),
            "{text}"
        );
    }

    #[test]
    fn lists_the_algorithms_a_library_has() {
        let bytes = b"\0MPIR_Allreduce_intra_ring\0MPIR_CVAR_X=%d\0MPIR_Bcast_intra_binomial\0";
        let names: Vec<String> = algorithms(bytes).into_iter().collect();
        assert_eq!(
            names,
            ["MPIR_Allreduce_intra_ring", "MPIR_Bcast_intra_binomial"]
        );
    }

    #[test]
    fn sizes_stay_within_what_atoi_reads() {
        assert_eq!(
            measure("allgatherv", 1 << 40, 4),
            ("total_msg_size", i32::MAX as u64)
        );
        assert_eq!(measure("alltoall", 1024, 4), ("avg_msg_size", 256));
        assert_eq!(measure("alltoall", 1025, 4), ("avg_msg_size", 257));
    }

    #[test]
    fn a_tree_without_the_collective_is_an_error() {
        let tables = vec![Table {
            op: "alltoall".into(),
            comm_size: 2,
            ranges: vec![],
        }];
        assert!(selection(&tables, BUILTIN, &|_| true).is_err());
    }

    #[test]
    fn finds_the_mpir_tree_among_the_library_strings() {
        let device = r#"{"collective=allreduce":{"composition=MPIDI_Allreduce_intra_composition_alpha":{}}}"#;
        let bytes = [
            b"\x7fELF\0".as_slice(),
            device.as_bytes(),
            b"\0",
            BUILTIN.as_bytes(),
            b"\0x",
        ]
        .concat();
        assert_eq!(builtin_tree(&bytes).as_deref(), Some(BUILTIN));
        assert_eq!(builtin_tree(b"nothing"), None);
    }
}
