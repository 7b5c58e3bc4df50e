//! The house has one direction (issue 20, shared/design.md): a module of imc-user imports only
//! from the layers below it — model, then sys, discovery, events, then plan, then the counting
//! backends and the sampler, then attribution, then the sampling pipeline, then record and
//! output, then the command line's types and the error mapping, then commands, then main. This
//! reads every `crate::` path outside test code and fails on an import that points up or
//! sideways, except the edges listed in `KNOWN`: the debt this check was written against, which
//! may only shrink (an edge that is gone must be struck from the list, so it cannot come back
//! unnoticed).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module of imc-user/src and its layer, lowest first.
const LAYERS: &[(&str, u8)] = &[
    ("model", 0),
    // Escaping outside text for a terminal: depends on nothing.
    ("text", 0),
    // Every environment variable imc reads, read once: depends on nothing.
    ("settings", 0),
    ("sys", 1),
    ("discovery", 2),
    ("events", 3),
    ("plan", 4),
    ("counting", 5),
    ("sampler", 5),
    ("attribution", 6),
    // The sampler drained into the attributor, the interval clock, the sink trait.
    ("pipeline", 7),
    ("record", 8),
    ("output", 8),
    // `imc serve`'s HTTP side: the web config file and the server (takes sys only).
    ("web", 8),
    // The command line's types and the one exit-code mapping, which the commands take in.
    ("cli", 9),
    ("error", 9),
    ("commands", 10),
    ("main", 11),
    ("lib", 11),
    ("bin", 11),
];

/// Imports that point the wrong way today (from, to), each to be removed by moving the type down
/// (model/) rather than the import up.
const KNOWN: &[(&str, &str)] = &[];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The `crate::X` modules a file's non-test code names (comments left out).
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../imc-user/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 50,
        "{} files under {}",
        files.len(),
        src.display()
    );
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue; // a module's unit tests, in a file of their own
        }
        let from = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let Some(lf) = layer(&from) else {
            panic!("{}: module {from} has no layer in LAYERS", rel.display());
        };
        for to in imports(&std::fs::read_to_string(f).unwrap()) {
            let Some(lt) = layer(&to) else { continue };
            if to == from || lt < lf {
                continue;
            }
            seen.insert((from.clone(), to.clone()));
            if !KNOWN.contains(&(from.as_str(), to.as_str())) {
                wrong.push(format!(
                    "{} imports crate::{to} (layer {lt} >= {lf})",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the direction:\n{}",
        wrong.join("\n")
    );
    let gone: Vec<_> = KNOWN
        .iter()
        .filter(|(a, b)| !seen.contains(&(a.to_string(), b.to_string())))
        .collect();
    assert!(
        gone.is_empty(),
        "no longer imported: strike from KNOWN: {gone:?}"
    );
}

#[test]
fn the_check_sees_an_upward_import() {
    let found = imports(
        "use crate::cli::GroupBy;\n// crate::commands in a comment\n#[cfg(test)]\nuse crate::output;",
    );
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["cli"]);
}
