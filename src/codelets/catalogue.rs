//! The codelet catalogue as JSON, for `commtune codelets` (the CLI links no MPI, so it loads the
//! library and asks it: the catalogue has one source, the registries).

use std::ffi::{CStr, CString};
use std::sync::LazyLock;

use serde_json::{Value, json};

use commtune_report::Op;

use super::halo::CODELETS;
use super::{Codelet, Operation};
use crate::mpi::{Allgatherv, Allreduce, Alltoall};

fn entries<C: Operation>() -> Value {
    let codelets: Vec<Value> = C::codelets()
        .iter()
        .map(|c: &Codelet<C>| {
            json!({
                "name": c.name,
                "partners": c.attributes.partners.name(),
                "uses_collectives": c.attributes.uses_collectives,
                "requires": c.requires.iter().map(|r| r.describe()).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "op": C::OP.name(), "codelets": codelets })
}

/// Halo codelets post the application's own point-to-point messages.
fn halo_entries() -> Value {
    let codelets: Vec<Value> = CODELETS
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "partners": "peers",
                "uses_collectives": false,
                "requires": c.requires.iter().map(|r| r.describe()).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "op": Op::Halo.name(), "codelets": codelets })
}

static CATALOGUE: LazyLock<CString> = LazyLock::new(|| {
    let all = json!({
        "operations": [
            entries::<Allreduce>(),
            entries::<Alltoall>(),
            entries::<Allgatherv>(),
            halo_entries(),
        ],
    });
    CString::new(all.to_string()).unwrap_or_default()
});

/// The catalogue as JSON.
pub fn json() -> &'static CStr {
    &CATALOGUE
}
