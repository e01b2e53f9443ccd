//! MPICH's collective selection file (`MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE`, read by
//! `src/mpi/coll/src/csel.c` of MPICH 4): a JSON tree whose keys are tests (`collective=allreduce`,
//! `comm_size<=4`, `avg_msg_size<1024`, ...), tried in order, down to `algorithm=MPIR_...` leaves.
//! The file replaces MPICH's built-in tree whole (a collective missing from it fails an
//! assertion), so the export starts from the built-in tree of the installed library, copied
//! verbatim, and replaces only the intra-communicator subtree of each exported collective: for
//! each exported communicator size exactly (`comm_size<N` → the built-in subtree,
//! `comm_size<=N` → the decisions), then the built-in subtree for every other size. Keys keep
//! their order (json-c keeps it; the tree depends on it), so this works on the text.

use std::ops::Range as Span;

use super::{Table, Unmapped};

/// The variable that makes MPICH read the file it names.
pub const VARIABLE: &str = "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE";

/// The codelets' counterparts among MPICH's MPIR-level algorithms (`coll_algorithms.txt` of
/// MPICH 4.0.2; `mpivars` lists them per collective), with the tests that keep each inside the
/// restrictions MPICH declares for it (checked by MPICH only when forced by its CVAR, not when
/// a selection file picks it).
fn algorithm(op: &str, codelet: &str, builtin: &str) -> Option<String> {
    let leaf = |name: &str| format!("{{\"algorithm=MPIR_{name}\":{{}}}}");
    let node = match (op, codelet) {
        (_, "native") => builtin.to_string(),
        ("allreduce", "recursive_doubling") => leaf("Allreduce_intra_recursive_doubling"),
        // restrictions: size-ge-pof2, builtin-op
        ("allreduce", "rabenseifner") => format!(
            "{{\"is_op_built_in=no\":{builtin},\"count<pow2\":{builtin},\"count=any\":{}}}",
            leaf("Allreduce_intra_reduce_scatter_allgather")
        ),
        ("alltoall", "bruck") => leaf("Alltoall_intra_brucks"),
        ("alltoall", "pairwise") => leaf("Alltoall_intra_pairwise"),
        // "scattered" posts every receive and send at once in batches of
        // MPIR_CVAR_ALLTOALL_THROTTLE (32) peers: commtune's linear up to 32 ranks.
        ("alltoall", "linear") => leaf("Alltoall_intra_scattered"),
        ("allgatherv", "bruck") => leaf("Allgatherv_intra_brucks"),
        ("allgatherv", "ring") => leaf("Allgatherv_intra_ring"),
        // restrictions: power-of-two
        ("allgatherv", "recursive_doubling") => format!(
            "{{\"comm_size=pow2\":{},\"comm_size=any\":{builtin}}}",
            leaf("Allgatherv_intra_recursive_doubling")
        ),
        _ => return None,
    };
    Some(node)
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
/// `tables` in place; and the decisions it could not carry. Errors when the built-in tree lacks
/// an exported collective's intra-communicator subtree.
pub fn selection(tables: &[Table], builtin: &str) -> Result<(String, Vec<Unmapped>), String> {
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
                let node = algorithm(op, &range.winner, default).unwrap_or_else(|| {
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
        let (text, unmapped) = selection(&tables, BUILTIN).expect("exports");
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
    fn unmapped_winners_keep_the_builtin_choice() {
        let tables = vec![Table {
            op: "allreduce".into(),
            comm_size: 2,
            ranges: vec![Range {
                from: 0,
                winner: "ring".into(),
                measured: vec![64],
            }],
        }];
        let (text, unmapped) = selection(&tables, BUILTIN).expect("exports");
        assert_eq!(unmapped.len(), 1);
        assert!(
            text.contains(&format!(r#""avg_msg_size=any":{DEFAULT}"#)),
            "{text}"
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
        assert!(selection(&tables, BUILTIN).is_err());
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
