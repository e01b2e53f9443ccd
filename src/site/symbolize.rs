//! Site descriptions to source locations, on rank 0 at report time.

use std::collections::HashMap;

use addr2line::Loader;
use commtune_report::{Location, SiteData};

use super::file_name;

/// Resolves sites to `file:line (function)` from DWARF, one loaded object file at a time.
#[derive(Default)]
pub struct Symbolizer {
    loaders: HashMap<String, Option<Loader>>,
}

impl Symbolizer {
    pub fn locate(&mut self, site: &SiteData) -> Location {
        if let Some(py) = &site.python {
            return Location {
                text: format!("{}:{} ({})", file_name(&py.file), py.line, py.function),
                file: Some(py.file.clone()),
                line: Some(py.line),
                function: Some(py.function.clone()),
            };
        }
        let fallback = Location {
            text: format!("{}+{:#x}", file_name(&site.object), site.address),
            file: None,
            line: None,
            function: None,
        };
        let loader = self
            .loaders
            .entry(site.object.clone())
            .or_insert_with(|| Loader::new(&site.object).ok());
        let Some(loader) = loader else {
            return fallback;
        };
        // The return address points after the call instruction; the call is the byte before.
        let probe = site.address.saturating_sub(1);
        let function = innermost_function(loader, probe);
        match loader.find_location(probe) {
            Ok(Some(loc)) if loc.file.is_some() && loc.line.is_some() => {
                let file = loc.file.unwrap_or_default().to_string();
                let line = loc.line.unwrap_or_default();
                let function = function.or_else(|| loader.find_symbol(probe).map(String::from));
                let text = match &function {
                    Some(f) => format!("{}:{} ({f})", file_name(&file), line),
                    None => format!("{}:{}", file_name(&file), line),
                };
                Location {
                    text,
                    file: Some(file),
                    line: Some(line),
                    function,
                }
            }
            _ => match loader.find_symbol(probe) {
                Some(symbol) => Location {
                    text: format!("{} ({symbol})", fallback.text),
                    function: Some(symbol.to_string()),
                    ..fallback
                },
                None => fallback,
            },
        }
    }
}

/// The function that contains the call (the innermost frame when calls were inlined).
fn innermost_function(loader: &Loader, probe: u64) -> Option<String> {
    let mut frames = loader.find_frames(probe).ok()?;
    let frame = frames.next().ok()??;
    let name = frame.function?.raw_name().ok()?.into_owned();
    Some(name)
}
