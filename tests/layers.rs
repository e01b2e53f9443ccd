//! The library's modules form layers: at every level of the module tree, the sibling modules
//! (each with everything inside it) depend on one another without a cycle, so each can be read
//! knowing only those below it. A module may use its own parts, and its parts may use what the
//! module itself defines; everything else a module names is an edge between siblings somewhere
//! up the tree. This test reads `use` declarations and `crate::`/`super::`/`self::` paths in
//! src/ (no MPI involved) and fails on a cycle, naming it. `cargo test --test layers --
//! --nocapture` prints the layers of the crate's top-level modules, lowest first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path, e.g. ["halo", "neighbor", "agree"]; the crate root is empty.
type Module = Vec<String>;

struct Source {
    module: Module,
    /// Children declared with `mod name;` in this file.
    children: BTreeSet<String>,
    text: String,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&root).unwrap().with_extension("");
            let mut module: Module = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = strip_comments_and_strings(&std::fs::read_to_string(&path).unwrap());
            let children = text
                .lines()
                .filter_map(|l| {
                    let l = l
                        .trim()
                        .trim_start_matches("pub ")
                        .trim_start_matches("pub(crate) ");
                    l.strip_prefix("mod ")?
                        .strip_suffix(';')
                        .map(str::to_string)
                })
                .collect();
            Source {
                module,
                children,
                text,
            }
        })
        .collect()
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // src/bin holds no library module (the CLI is its own crate).
            if path.file_name().is_some_and(|n| n != "bin") {
                collect(&path, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The text with comments, string and char literals blanked (paths in them are not references).
fn strip_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1).copied() == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if chars[i] == '/' && chars.get(i + 1).copied() == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1).copied() == Some('/')) {
                i += 1;
            }
            i += 2;
        } else if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if chars[i] == '\'' && chars.get(i + 2).copied() == Some('\'') {
            i += 3;
        } else if chars[i] == '\'' && chars.get(i + 1).copied() == Some('\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// Every path a `use` tree names, e.g. `crate::{a, b::{c, d}}` gives crate::a, crate::b::c,
/// crate::b::d.
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in tree.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if matches!(c, '{' | '}' | ',' | '*') {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    let mut paths = Vec::new();
    tree_paths(&tokens, &mut 0, &mut Vec::new(), &mut paths);
    paths
}

/// The paths of the use tree at `tokens[*at..]` (up to its `,` or `}`), after `prefix`.
fn tree_paths(
    tokens: &[String],
    at: &mut usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    let depth = prefix.len();
    while let Some(token) = tokens.get(*at) {
        match token.as_str() {
            "{" => {
                *at += 1;
                while tokens.get(*at).is_some_and(|t| t != "}") {
                    tree_paths(tokens, at, prefix, out);
                    if tokens.get(*at).is_some_and(|t| t == ",") {
                        *at += 1;
                    }
                }
                *at += 1;
                prefix.truncate(depth);
                return;
            }
            "," | "}" => break,
            "as" => *at += 2,
            "*" | "self" => *at += 1,
            word => {
                prefix.push(word.to_string());
                *at += 1;
            }
        }
    }
    if !prefix.is_empty() {
        out.push(prefix.clone());
    }
    prefix.truncate(depth);
}

/// Paths named outside `use` declarations: `crate::a::b`, `super::c`, `self::d`.
fn inline_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .collect();
    for word in words {
        let parts: Vec<&str> = word.split("::").collect();
        if parts.len() > 1 && matches!(parts[0], "crate" | "super" | "self") {
            paths.push(
                parts
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| p.to_string())
                    .collect(),
            );
        }
    }
    paths
}

/// The module a path from `source` names (its longest prefix that is a module).
fn resolve(source: &Source, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let (mut base, rest): (Module, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (source.module.clone(), &path[1..]),
        "super" => {
            let mut base = source.module.clone();
            let mut rest = path;
            while rest.first().is_some_and(|p| p == "super") {
                base.pop();
                rest = &rest[1..];
            }
            (base, rest)
        }
        child if source.children.contains(child) => (source.module.clone(), path),
        _ => return None,
    };
    for part in rest {
        let mut next = base.clone();
        next.push(part.clone());
        if !modules.contains(&next) {
            break;
        }
        base = next;
    }
    Some(base)
}

/// Every reference from one module to another.
fn references() -> (BTreeSet<Module>, BTreeSet<(Module, Module)>) {
    let sources = sources();
    let modules: BTreeSet<Module> = sources.iter().map(|s| s.module.clone()).collect();
    let mut edges = BTreeSet::new();
    for source in &sources {
        let mut paths = inline_paths(&source.text);
        for statement in source.text.split(';') {
            let statement = statement.trim();
            let tree = statement
                .rsplit_once("use ")
                .filter(|(before, _)| {
                    before.trim().is_empty()
                        || before.trim_end().ends_with("pub")
                        || before.trim_end().ends_with(')')
                        || before.trim_end().ends_with('}')
                        || before.trim_end().ends_with(']')
                })
                .map(|(_, tree)| tree);
            if let Some(tree) = tree {
                paths.extend(use_paths(tree));
            }
        }
        for path in paths {
            if let Some(target) = resolve(source, &path, &modules)
                && target != source.module
            {
                edges.insert((source.module.clone(), target));
            }
        }
    }
    (modules, edges)
}

/// At every level: the child of `parent` that `module` lies in (None outside `parent`).
fn child_of(parent: &Module, module: &Module) -> Option<String> {
    (module.len() > parent.len() && module[..parent.len()] == parent[..])
        .then(|| module[parent.len()].clone())
}

/// The cycles among the children of each module: `parent: {a, b, c}` for each group of
/// children that reach one another, with the references that tie them.
fn cycles(modules: &BTreeSet<Module>, edges: &BTreeSet<(Module, Module)>) -> Vec<String> {
    let mut found = Vec::new();
    for parent in modules {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut why: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for (from, to) in edges {
            if let (Some(a), Some(b)) = (child_of(parent, from), child_of(parent, to))
                && a != b
            {
                graph.entry(a.clone()).or_default().insert(b.clone());
                why.entry((a, b))
                    .or_default()
                    .push(format!("{} uses {}", name(from), name(to)));
            }
        }
        for group in tied_groups(&graph) {
            let ties: Vec<String> = why
                .iter()
                .filter(|((a, b), _)| group.contains(a) && group.contains(b))
                .flat_map(|(_, uses)| uses.iter().cloned())
                .collect();
            found.push(format!(
                "{}: {{{}}}\n    {}",
                name(parent),
                group.iter().cloned().collect::<Vec<_>>().join(", "),
                ties.join("\n    ")
            ));
        }
    }
    found
}

/// The groups of two or more nodes that all reach one another (strongly connected components).
fn tied_groups(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(node) = todo.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for (node, from_node) in &reached {
        if !from_node.contains(*node) || groups.iter().any(|g| g.contains(*node)) {
            continue;
        }
        let group = from_node
            .iter()
            .filter(|other| reached.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        groups.push(group);
    }
    groups
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// The crate's top-level modules in layers: each depends only on layers before it.
fn top_layers(modules: &BTreeSet<Module>, edges: &BTreeSet<(Module, Module)>) -> Vec<Vec<String>> {
    let top: BTreeSet<String> = modules.iter().filter_map(|m| m.first().cloned()).collect();
    let mut needs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in edges {
        if let (Some(a), Some(b)) = (from.first(), to.first())
            && a != b
        {
            needs.entry(a.clone()).or_default().insert(b.clone());
        }
    }
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut layers = Vec::new();
    while placed.len() < top.len() {
        let layer: Vec<String> = top
            .iter()
            .filter(|m| !placed.contains(*m))
            .filter(|m| needs.get(*m).is_none_or(|n| n.is_subset(&placed)))
            .cloned()
            .collect();
        if layer.is_empty() {
            break;
        }
        placed.extend(layer.iter().cloned());
        layers.push(layer);
    }
    layers
}

#[test]
fn modules_form_layers_without_cycles() {
    let (modules, edges) = references();
    assert!(
        modules.len() > 20 && edges.len() > 50,
        "the source was not read: {} modules, {} references",
        modules.len(),
        edges.len()
    );
    for (i, layer) in top_layers(&modules, &edges).iter().enumerate() {
        println!("layer {i}: {}", layer.join(", "));
    }
    let cycles = cycles(&modules, &edges);
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn use_trees_expand_to_every_path() {
    let paths = use_paths("crate::{a, b::{c, d as e}, f::*}");
    let names: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        names,
        ["crate::a", "crate::b::c", "crate::b::d", "crate::f"]
    );
}
