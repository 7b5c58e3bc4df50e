//! The house has one direction: a module of imc-user imports only from the layers below it — model,
//! then sys, discovery, events, then plan, then the counting backends and the sampler, then
//! attribution, then the sampling pipeline, then record and output, then the command line's types
//! and the error mapping, then commands, then main.
//!
//! Cargo's dependency graph keeps the tools out of the product: the simulator (imc-sim) and the
//! benchmark and accuracy binaries (imc-tools) are crates on top of imc-user's library, and
//! imc-user depends on neither (its manifest is checked here, through `cargo metadata`). Inside
//! imc-user, where Cargo cannot say which module may use which, the direction is checked here.
//!
//! The check parses the crate with `syn`: it starts at lib.rs and main.rs,
//! follows every `mod` declaration into its file (inline modules included), and leaves out what
//! only a test build compiles by its attribute (`#[cfg(test)]`, `#[test]`), wherever it stands in
//! the file. Every `use` (groups, nested groups, `self`, renames, globs, inside function bodies
//! too), every path in an expression, type, pattern or attribute, and every `crate::`/`super::`
//! path inside a macro's tokens is resolved, through `use` bindings and re-exports (the crate
//! root's included), to the module that defines what it names. From that, two graphs:
//! - top-level modules: an edge may only point to a lower layer (both the module a path names
//!   and the one the item is defined in), except the edges listed in `KNOWN`;
//! - files: no cycle (a step file that uses what its mod.rs defines while mod.rs uses the step
//!   file is one), except the edges listed in `KNOWN_CYCLES`.
//!
//! The KNOWN lists are the edges still tolerated: they may only shrink (an edge that is gone
//! must be struck, so it cannot come back unnoticed).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

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
    // Stack addresses → frames while the process lives (model, sys, discovery, text, settings).
    ("symbols", 5),
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
];

/// Imports that point the wrong way today (from, to), each to be removed by moving the type down
/// (model/) rather than the import up.
const KNOWN: &[(&str, &str)] = &[];

/// File edges (from, to; paths under imc-user/src) that lie on an import cycle today, each with
/// the first path that makes it: a mod.rs that calls its step files while they take what it
/// defines. Each goes when the shared items move to a file of their own below both (an error
/// type, a context, the chunk constants), as sampler/ keeps them.
const KNOWN_CYCLES: &[(&str, &str)] = &[];

/// Files under imc-user/src that no `mod` declaration reaches today: never compiled, so never
/// checked; to be deleted or declared.
const KNOWN_DEAD: &[&str] = &[];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

type ModPath = Vec<String>;

/// One module of a crate: where it is written and what its items name.
#[derive(Default)]
struct Module {
    /// The file (relative to the source root) that holds it; an inline module shares its
    /// parent's.
    file: PathBuf,
    children: BTreeSet<String>,
    /// `use` bindings: name → the path as written (resolved from this module).
    bindings: BTreeMap<String, Vec<String>>,
    /// `use P::*`: each P as written.
    globs: Vec<Vec<String>>,
    /// Items defined here (fn, struct, enum, const, trait, macro …).
    defined: BTreeSet<String>,
    /// Every path this module's non-test code names.
    refs: Vec<Ref>,
}

struct Ref {
    segments: Vec<String>,
    glob: bool,
}

impl Ref {
    fn text(&self) -> String {
        let mut t = self.segments.join("::");
        if self.glob {
            t.push_str("::*");
        }
        t
    }
}

/// One crate's module tree. `label` is the layer name every module of a binary crate takes
/// (`main`); the library's modules take their top-level module's name.
struct Crate {
    label: Option<String>,
    modules: BTreeMap<ModPath, Module>,
}

/// What a source tree's check found.
#[derive(Debug, Default)]
struct Findings {
    /// (from, to, "file: crate::x::Y (…)") for each path that points up or sideways.
    upward: Vec<(String, String, String)>,
    /// (from, to) top-level module edges that point up or sideways.
    upward_edges: BTreeSet<(String, String)>,
    /// File edges that lie on a cycle.
    cycles: BTreeSet<(String, String)>,
    /// For each file edge, the first path that makes it.
    because: BTreeMap<(String, String), String>,
    /// Files under the source root that no `mod` declaration reaches.
    unreached: Vec<String>,
    /// Files read as production code; edges found.
    files: usize,
    edges: usize,
}

/// Whether an item only exists in a test build: `#[test]`, or a `cfg` that requires `test`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if a.path().is_ident("test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        a.parse_args::<syn::Meta>()
            .is_ok_and(|m| cfg_requires_test(&m))
    })
}

fn cfg_requires_test(meta: &syn::Meta) -> bool {
    use syn::punctuated::Punctuated;
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(l) => {
            let Ok(inner) =
                l.parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
            else {
                return false;
            };
            if l.path.is_ident("all") {
                inner.iter().any(cfg_requires_test)
            } else if l.path.is_ident("any") {
                !inner.is_empty() && inner.iter().all(cfg_requires_test)
            } else {
                false // not(test) and the rest are compiled outside tests
            }
        }
        syn::Meta::NameValue(_) => false,
    }
}

/// The leaves of a use tree: (path, bound name or None for a glob).
fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                // `use a::{self}`: a itself.
                if let Some(last) = prefix.last().cloned() {
                    out.push((prefix.clone(), Some(last)));
                }
            } else {
                let mut p = prefix.clone();
                p.push(name.clone());
                out.push((p, Some(name)));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            if r.ident != "self" {
                p.push(r.ident.to_string());
            }
            out.push((p, Some(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(
        match item {
            syn::Item::Const(i) => &i.ident,
            syn::Item::Enum(i) => &i.ident,
            syn::Item::Fn(i) => &i.sig.ident,
            syn::Item::Macro(i) => i.ident.as_ref()?,
            syn::Item::Static(i) => &i.ident,
            syn::Item::Struct(i) => &i.ident,
            syn::Item::Trait(i) => &i.ident,
            syn::Item::TraitAlias(i) => &i.ident,
            syn::Item::Type(i) => &i.ident,
            syn::Item::Union(i) => &i.ident,
            _ => return None,
        }
        .to_string(),
    )
}

fn attrs_of(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Collects the paths an item names: every multi-segment path without a leading `::`, every
/// `crate::`/`super::`/`self::` path in macro and attribute tokens (string literals included,
/// as serde's `with = "crate::…"`), and the `use` declarations of function bodies. Test-only
/// items, statements and arms are skipped; visibilities (`pub(crate)`) are not paths to a module.
struct Refs<'m> {
    module: &'m mut Module,
}

impl Refs<'_> {
    fn add_use(&mut self, u: &syn::ItemUse) {
        if u.leading_colon.is_some() {
            return; // `use ::x`: another crate
        }
        let mut leaves = Vec::new();
        flatten_use(&u.tree, &mut Vec::new(), &mut leaves);
        for (path, name) in leaves {
            match name {
                Some(n) => {
                    if n != "_" {
                        self.module
                            .bindings
                            .entry(n)
                            .or_insert_with(|| path.clone());
                    }
                    self.module.refs.push(Ref {
                        segments: path,
                        glob: false,
                    });
                }
                None => {
                    self.module.globs.push(path.clone());
                    self.module.refs.push(Ref {
                        segments: path,
                        glob: true,
                    });
                }
            }
        }
    }

    fn scan_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let tt: Vec<TokenTree> = tokens.into_iter().collect();
        let is_colons = |i: usize| {
            matches!((tt.get(i), tt.get(i + 1)),
                (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                    if a.as_char() == ':' && b.as_char() == ':')
        };
        let mut i = 0;
        while i < tt.len() {
            match &tt[i] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Literal(l) => {
                    if let Ok(s) = syn::parse2::<syn::LitStr>(TokenTree::Literal(l.clone()).into())
                    {
                        self.add_str(&s);
                    }
                }
                TokenTree::Ident(id)
                    if ["crate", "super", "self"].contains(&id.to_string().as_str())
                        && is_colons(i + 1) =>
                {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while is_colons(j) {
                        match tt.get(j + 2) {
                            Some(TokenTree::Ident(next)) => {
                                segs.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.module.refs.push(Ref {
                        segments: segs,
                        glob: false,
                    });
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// A string that spells a path of this crate (serde's `with = "crate::…"`).
    fn add_str(&mut self, s: &syn::LitStr) {
        let v = s.value();
        if ["crate::", "super::", "self::"]
            .iter()
            .any(|p| v.starts_with(p))
            && let Ok(p) = syn::parse_str::<syn::Path>(&v)
        {
            self.add_path(&p);
        }
    }

    fn add_path(&mut self, p: &syn::Path) {
        if p.leading_colon.is_some() || p.segments.len() < 2 {
            return;
        }
        self.module.refs.push(Ref {
            segments: p.segments.iter().map(|s| s.ident.to_string()).collect(),
            glob: false,
        });
    }
}

impl<'ast> Visit<'ast> for Refs<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if test_only(attrs_of(i)) {
            return;
        }
        syn::visit::visit_item(self, i);
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.add_use(u);
    }
    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match i {
            syn::ImplItem::Const(x) => &x.attrs,
            syn::ImplItem::Fn(x) => &x.attrs,
            syn::ImplItem::Type(x) => &x.attrs,
            syn::ImplItem::Macro(x) => &x.attrs,
            _ => &[],
        };
        if !test_only(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }
    fn visit_trait_item(&mut self, i: &'ast syn::TraitItem) {
        let attrs: &[syn::Attribute] = match i {
            syn::TraitItem::Const(x) => &x.attrs,
            syn::TraitItem::Fn(x) => &x.attrs,
            syn::TraitItem::Type(x) => &x.attrs,
            syn::TraitItem::Macro(x) => &x.attrs,
            _ => &[],
        };
        if !test_only(attrs) {
            syn::visit::visit_trait_item(self, i);
        }
    }
    fn visit_stmt(&mut self, s: &'ast syn::Stmt) {
        let attrs: &[syn::Attribute] = match s {
            syn::Stmt::Local(l) => &l.attrs,
            syn::Stmt::Macro(m) => &m.attrs,
            syn::Stmt::Expr(e, _) => expr_attrs(e),
            syn::Stmt::Item(_) => &[],
        };
        if !test_only(attrs) {
            syn::visit::visit_stmt(self, s);
        }
    }
    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        if !test_only(&a.attrs) {
            syn::visit::visit_arm(self, a);
        }
    }
    fn visit_field(&mut self, f: &'ast syn::Field) {
        if !test_only(&f.attrs) {
            syn::visit::visit_field(self, f);
        }
    }
    fn visit_variant(&mut self, v: &'ast syn::Variant) {
        if !test_only(&v.attrs) {
            syn::visit::visit_variant(self, v);
        }
    }
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.add_path(p);
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.scan_tokens(m.tokens.clone());
    }
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if a.path().is_ident("doc") {
            return; // prose
        }
        self.visit_path(a.path());
        match &a.meta {
            syn::Meta::List(l) => self.scan_tokens(l.tokens.clone()),
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => self.add_str(s),
                other => self.visit_expr(other),
            },
            syn::Meta::Path(_) => {}
        }
    }
}

fn expr_attrs(e: &syn::Expr) -> &[syn::Attribute] {
    match e {
        syn::Expr::Block(b) => &b.attrs,
        syn::Expr::Call(c) => &c.attrs,
        syn::Expr::MethodCall(c) => &c.attrs,
        syn::Expr::Macro(m) => &m.attrs,
        syn::Expr::If(i) => &i.attrs,
        syn::Expr::Match(m) => &m.attrs,
        syn::Expr::Assign(a) => &a.attrs,
        syn::Expr::Unsafe(u) => &u.attrs,
        _ => &[],
    }
}

/// A walk through a source tree: its root, the files read as production code and the files
/// (or directories) only test builds read.
struct Walk<'a> {
    src: &'a Path,
    read: BTreeSet<PathBuf>,
    test_files: Vec<PathBuf>,
}

impl Crate {
    /// Reads a crate from its root file (relative to the walk's source root), following `mod`
    /// declarations.
    fn load(w: &mut Walk, root: &str, label: Option<&str>) -> Crate {
        let mut c = Crate {
            label: label.map(str::to_string),
            modules: BTreeMap::new(),
        };
        let root = PathBuf::from(root);
        let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
        c.load_file(w, &root, Vec::new(), &dir);
        c
    }

    fn load_file(&mut self, w: &mut Walk, file: &Path, path: ModPath, dir: &Path) {
        let full = w.src.join(file);
        let text =
            std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
        w.read.insert(file.to_path_buf());
        self.load_items(w, &ast.items, file, path, dir);
    }

    /// `dir`: where the out-of-line modules this module declares live.
    fn load_items(
        &mut self,
        w: &mut Walk,
        items: &[syn::Item],
        file: &Path,
        path: ModPath,
        dir: &Path,
    ) {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut submodules = Vec::new();
        for item in items {
            let test = test_only(attrs_of(item));
            if let syn::Item::Mod(m) = item {
                let name = m.ident.to_string();
                let custom = m.attrs.iter().find_map(|a| match &a.meta {
                    syn::Meta::NameValue(nv) if a.path().is_ident("path") => match &nv.value {
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        }) => Some(s.value()),
                        _ => None,
                    },
                    _ => None,
                });
                let (child_file, child_dir) = match (&m.content, custom) {
                    (Some(_), _) => (None, dir.join(&name)),
                    (None, Some(p)) => {
                        let f = file.parent().unwrap_or(Path::new("")).join(p);
                        let d = f.parent().unwrap_or(Path::new("")).to_path_buf();
                        (Some(f), d)
                    }
                    (None, None) => {
                        let flat = dir.join(format!("{name}.rs"));
                        if w.src.join(&flat).is_file() {
                            (Some(flat), dir.join(&name))
                        } else {
                            (Some(dir.join(&name).join("mod.rs")), dir.join(&name))
                        }
                    }
                };
                if test {
                    // Neither the module nor anything under its directory is production code.
                    if let Some(f) = child_file {
                        w.test_files.push(f);
                    }
                    w.test_files.push(child_dir);
                    continue;
                }
                module.children.insert(name.clone());
                submodules.push((
                    name,
                    m.content.as_ref().map(|(_, i)| i),
                    child_file,
                    child_dir,
                ));
                continue;
            }
            if test {
                continue;
            }
            if let Some(n) = item_name(item) {
                module.defined.insert(n);
            }
            Refs {
                module: &mut module,
            }
            .visit_item(item);
        }
        self.modules.insert(path.clone(), module);
        for (name, inline, child_file, child_dir) in submodules {
            let mut child = path.clone();
            child.push(name);
            match (inline, child_file) {
                (Some(items), _) => self.load_items(w, items, file, child, &child_dir),
                (None, Some(f)) => self.load_file(w, &f, child, &child_dir),
                (None, None) => unreachable!("an out-of-line module has a file"),
            }
        }
    }

    fn module(&self, p: &[String]) -> Option<&Module> {
        self.modules.get(p)
    }

    /// A path as written in module `ctx`, made absolute (module path, then item segments).
    /// None: it names another crate, the prelude, or a local item (`Self::…`, `Type::new`).
    fn absolute(&self, ctx: &[String], segs: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > 32 || segs.is_empty() {
            return None;
        }
        let mut base: Vec<String> = ctx.to_vec();
        let mut rest = segs;
        match rest[0].as_str() {
            "crate" => {
                base.clear();
                rest = &rest[1..];
            }
            "self" => rest = &rest[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            first => {
                let m = self.module(ctx)?;
                if m.children.contains(first) {
                    // a child module: ctx::first::…
                } else if let Some(b) = m.bindings.get(first) {
                    if b.as_slice() == segs {
                        return None; // `use std::x;` binds x to itself: extern
                    }
                    let mut abs = self.absolute(ctx, b, depth + 1)?;
                    abs.extend_from_slice(&rest[1..]);
                    return Some(abs);
                } else {
                    return None;
                }
            }
        }
        base.extend_from_slice(rest);
        Some(base)
    }

    /// The module that defines what an absolute path names (re-exports followed).
    fn locate(&self, abs: &[String], depth: usize) -> Vec<String> {
        let mut cur: Vec<String> = Vec::new();
        for seg in abs {
            let Some(m) = self.module(&cur) else { break };
            if m.children.contains(seg) {
                cur.push(seg.clone());
            } else {
                return self.origin(&cur, seg, depth);
            }
        }
        cur
    }

    /// Where item `name`, as seen from module `m`, is defined: through m's `use` bindings and
    /// glob imports to the module whose item it is.
    fn origin(&self, m: &[String], name: &str, depth: usize) -> Vec<String> {
        let Some(module) = self.module(m) else {
            return m.to_vec();
        };
        if depth > 32 || module.defined.contains(name) {
            return m.to_vec();
        }
        if let Some(b) = module.bindings.get(name) {
            return match self.absolute(m, b, depth + 1) {
                Some(abs) => self.locate(&abs, depth + 1),
                None => m.to_vec(), // re-exported from another crate
            };
        }
        for g in &module.globs {
            let Some(gabs) = self.absolute(m, g, depth + 1) else {
                continue;
            };
            let gm = self.locate(&gabs, depth + 1);
            if gm == gabs
                && let Some(target) = self.module(&gm)
                && (target.defined.contains(name)
                    || target.bindings.contains_key(name)
                    || target.children.contains(name))
            {
                return if target.children.contains(name) {
                    let mut p = gm.clone();
                    p.push(name.to_string());
                    p
                } else {
                    self.origin(&gm, name, depth + 1)
                };
            }
        }
        m.to_vec()
    }

    fn top(&self, p: &[String]) -> String {
        match (&self.label, p.first()) {
            (Some(l), _) => l.clone(),
            (None, Some(t)) => t.clone(),
            (None, None) => "lib".to_string(),
        }
    }
}

/// Checks a source tree: `roots` are its crate roots (file under `src`, and the layer label of a
/// binary crate; None for the library, whose modules are labelled by their top-level module).
fn check(src: &Path, roots: &[(&str, Option<&str>)]) -> Findings {
    let mut w = Walk {
        src,
        read: BTreeSet::new(),
        test_files: Vec::new(),
    };
    let crates: Vec<Crate> = roots
        .iter()
        .map(|(f, l)| Crate::load(&mut w, f, *l))
        .collect();
    let mut f = Findings {
        files: w.read.len(),
        ..Findings::default()
    };
    let mut file_edges: BTreeSet<(PathBuf, PathBuf)> = BTreeSet::new();
    for c in &crates {
        for (path, m) in &c.modules {
            let from = c.top(path);
            let lf = layer(&from).unwrap_or_else(|| {
                panic!("{}: module {from} has no layer in LAYERS", m.file.display())
            });
            for r in &m.refs {
                let Some(abs) = c.absolute(path, &r.segments, 0) else {
                    continue;
                };
                let target = c.locate(&abs, 0);
                let Some(tm) = c.module(&target) else {
                    continue;
                };
                f.edges += 1;
                if tm.file != m.file {
                    file_edges.insert((m.file.clone(), tm.file.clone()));
                    f.because
                        .entry((m.file.display().to_string(), tm.file.display().to_string()))
                        .or_insert_with(|| r.text());
                }
                // The module the item is defined in, and the top-level module the path goes
                // through (a path into `crate::plan` depends on plan even where plan only
                // re-exports something lower). The crate root is only a way through.
                let mut tops = BTreeSet::from([c.top(&target)]);
                if c.label.is_none()
                    && let Some(first) = abs.first()
                    && c.module(&[])
                        .is_some_and(|root| root.children.contains(first))
                {
                    tops.insert(first.clone());
                }
                for to in tops {
                    if to == from {
                        continue;
                    }
                    let lt = layer(&to).unwrap_or_else(|| {
                        panic!("{}: module {to} has no layer in LAYERS", tm.file.display())
                    });
                    if lt < lf {
                        continue;
                    }
                    let line = format!(
                        "{}: {} ({from}, layer {lf}, imports {to}, layer {lt})",
                        m.file.display(),
                        r.text()
                    );
                    f.upward.push((from.clone(), to.clone(), line));
                    f.upward_edges.insert((from.clone(), to));
                }
            }
        }
    }
    f.cycles = on_cycles(&file_edges)
        .into_iter()
        .map(|(a, b)| (a.display().to_string(), b.display().to_string()))
        .collect();
    let mut all = Vec::new();
    rust_files(src, src, &mut all);
    f.unreached = all
        .into_iter()
        .filter(|p| !w.read.contains(p) && !w.test_files.iter().any(|t| p.starts_with(t)))
        .map(|p| p.display().to_string())
        .collect();
    f
}

/// The edges of a directed graph that lie on a cycle: both ends in one strongly connected
/// component (Tarjan's algorithm).
fn on_cycles<N: Ord + Clone>(edges: &BTreeSet<(N, N)>) -> BTreeSet<(N, N)> {
    let nodes: Vec<&N> = edges
        .iter()
        .flat_map(|(a, b)| [a, b])
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let id = |n: &N| nodes.binary_search(&n).unwrap();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges {
        adj[id(a)].push(id(b));
    }
    #[derive(Default)]
    struct Tarjan {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        comp: Vec<usize>,
        next: usize,
        comps: usize,
    }
    fn visit(v: usize, adj: &[Vec<usize>], t: &mut Tarjan) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on_stack[v] = true;
        for &w in &adj[v] {
            match t.index[w] {
                None => {
                    visit(w, adj, t);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on_stack[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            while let Some(w) = t.stack.pop() {
                t.on_stack[w] = false;
                t.comp[w] = t.comps;
                if w == v {
                    break;
                }
            }
            t.comps += 1;
        }
    }
    let n = nodes.len();
    let mut t = Tarjan {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        comp: vec![0; n],
        ..Tarjan::default()
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(v, &adj, &mut t);
        }
    }
    edges
        .iter()
        .filter(|(a, b)| t.comp[id(a)] == t.comp[id(b)])
        .cloned()
        .collect()
}

fn rust_files(src: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(src, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(src).unwrap().to_path_buf());
        }
    }
}

#[test]
fn no_module_imports_one_above_it_and_no_file_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../imc-user/src");
    // imc-user's crate roots: the library and the `imc` binary (its only targets, below).
    let f = check(&src, &[("lib.rs", None), ("main.rs", Some("main"))]);
    assert!(
        f.files > 50,
        "{} files read under {}",
        f.files,
        src.display()
    );
    assert!(f.edges > 500, "only {} resolved paths", f.edges);
    let dead: Vec<&str> = f.unreached.iter().map(String::as_str).collect();
    assert_eq!(
        dead, KNOWN_DEAD,
        "files no `mod` declaration reaches (dead code, or a declaration this check misreads), \
         against KNOWN_DEAD"
    );
    let wrong: Vec<&str> = f
        .upward
        .iter()
        .filter(|(a, b, _)| !KNOWN.contains(&(a.as_str(), b.as_str())))
        .map(|(_, _, line)| line.as_str())
        .collect();
    assert!(
        wrong.is_empty(),
        "imports against the direction:\n{}",
        wrong.join("\n")
    );
    let gone: Vec<_> = KNOWN
        .iter()
        .filter(|(a, b)| !f.upward_edges.contains(&(a.to_string(), b.to_string())))
        .collect();
    assert!(
        gone.is_empty(),
        "no longer imported: strike from KNOWN: {gone:?}"
    );
    let known: BTreeSet<(String, String)> = KNOWN_CYCLES
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let new: Vec<String> = f
        .cycles
        .difference(&known)
        .map(|e| format!("{} -> {} ({})", e.0, e.1, f.because[e]))
        .collect();
    assert!(
        new.is_empty(),
        "file edges on an import cycle ({}):\n{}",
        new.len(),
        new.join("\n")
    );
    let gone: Vec<_> = known.difference(&f.cycles).collect();
    assert!(
        gone.is_empty(),
        "no longer on a cycle: strike from KNOWN_CYCLES: {gone:?}"
    );
}

/// A source tree in a temporary directory: (path under src, text).
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (p, text) in files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn lib_only(dir: &tempfile::TempDir) -> Findings {
    check(dir.path(), &[("lib.rs", None)])
}

const LIB: &str = "pub mod model;\npub mod plan;\npub mod sampler;\n";
const PLAN: &str = "pub mod inner;\npub struct Plan;\npub fn make() -> Plan { Plan }\n";
const INNER: &str = "pub struct Thing;\npub const NAME: &str = \"x\";\n";
const SAMPLER: &str = "pub struct Sampler;\n";

fn synthetic(model: &str) -> Findings {
    let dir = tree(&[
        ("lib.rs", LIB),
        ("model.rs", model),
        ("plan/mod.rs", PLAN),
        ("plan/inner.rs", INNER),
        ("sampler/mod.rs", SAMPLER),
    ]);
    lib_only(&dir)
}

fn edges(f: &Findings) -> Vec<(String, String)> {
    f.upward_edges.iter().cloned().collect()
}

fn up(to: &str) -> Vec<(String, String)> {
    vec![("model".to_string(), to.to_string())]
}

#[test]
fn a_clean_tree_has_no_finding() {
    // Prose and strings in code name nothing: a doc comment, an error message.
    let f = synthetic(
        "/// Read by crate::plan::make.\npub struct Channel;\n\
         fn f() -> std::io::Result<&'static str> { Ok(\"crate::plan::make\") }\n",
    );
    assert_eq!(edges(&f), vec![]);
    assert!(f.unreached.is_empty() && f.cycles.is_empty(), "{f:?}");
    assert_eq!(f.files, 5);
}

#[test]
fn a_grouped_use_is_caught() {
    // The old text scan read `crate::` and then `{`: nothing.
    let f = synthetic("use crate::{plan::Plan, model as me};\n");
    assert_eq!(edges(&f), up("plan"), "{f:?}");
}

#[test]
fn nested_groups_renames_self_and_globs_are_caught() {
    assert_eq!(
        edges(&synthetic("use crate::{sampler::{self as s}};\n")),
        up("sampler")
    );
    assert_eq!(
        edges(&synthetic(
            "use crate::{model::A, plan::{inner::{Thing as T}}};\n"
        )),
        up("plan")
    );
    assert_eq!(
        edges(&synthetic("use crate::plan::inner::*;\n")),
        up("plan")
    );
    assert_eq!(
        edges(&synthetic("use crate::plan;\nfn f() { plan::make(); }\n")),
        up("plan")
    );
}

#[test]
fn a_crate_root_re_export_is_caught() {
    // `crate::Plan` names no module: the scan resolves it through the re-export, never taking
    // `Plan` for a module it does not know.
    let dir = tree(&[
        (
            "lib.rs",
            &format!("{LIB}pub use plan::Plan;\npub use sampler::*;\n"),
        ),
        ("model.rs", "use crate::Plan;\nfn f(_: crate::Sampler) {}\n"),
        ("plan/mod.rs", PLAN),
        ("plan/inner.rs", INNER),
        ("sampler/mod.rs", SAMPLER),
    ]);
    let f = lib_only(&dir);
    assert_eq!(
        edges(&f),
        vec![
            ("model".to_string(), "plan".to_string()),
            ("model".to_string(), "sampler".to_string())
        ],
        "{f:?}"
    );
    // And an item defined in lib.rs itself is the top layer.
    let dir = tree(&[
        ("lib.rs", &format!("{LIB}pub fn top() {{}}\n")),
        ("model.rs", "fn f() { crate::top() }\n"),
        ("plan/mod.rs", PLAN),
        ("plan/inner.rs", INNER),
        ("sampler/mod.rs", SAMPLER),
    ]);
    assert_eq!(edges(&lib_only(&dir)), up("lib"));
}

#[test]
fn a_use_after_a_test_module_is_caught_and_test_code_is_not() {
    // The old scan stopped at the first `#[cfg(test)]` line.
    let f = synthetic(
        "#[cfg(test)]\nmod tests {\n    use crate::sampler::Sampler;\n}\n\nuse crate::plan::Plan;\n",
    );
    assert_eq!(edges(&f), up("plan"), "{f:?}");
    // Test-only code is left out by its attribute, wherever it stands.
    let f = synthetic(
        "pub struct A;\n#[cfg(test)]\nuse crate::plan::Plan;\n#[cfg(all(test, unix))]\nfn t() { crate::plan::make(); }\n\
         #[test]\nfn u() { crate::sampler::Sampler; }\nimpl A {\n    #[cfg(test)]\n    fn v() { crate::plan::make(); }\n}\n",
    );
    assert_eq!(edges(&f), vec![], "{f:?}");
    // `not(test)` is production code.
    let f = synthetic("#[cfg(not(test))]\nfn t() { crate::plan::make(); }\n");
    assert_eq!(edges(&f), up("plan"));
}

#[test]
fn a_path_expression_type_or_macro_argument_is_caught() {
    assert_eq!(
        edges(&synthetic("fn f() { let _ = crate::plan::make(); }\n")),
        up("plan")
    );
    assert_eq!(
        edges(&synthetic(
            "pub struct S { p: Option<crate::plan::Plan> }\n"
        )),
        up("plan")
    );
    assert_eq!(
        edges(&synthetic(
            "fn f() -> String { format!(\"{}\", crate::plan::inner::NAME) }\n"
        )),
        up("plan")
    );
    assert_eq!(
        edges(&synthetic(
            "#[derive(serde::Serialize)]\npub struct S { #[serde(with = \"crate::sampler::codec\")] x: u8 }\n"
        )),
        up("sampler")
    );
    // `pub(crate)` is a visibility, not an import of the crate root.
    assert_eq!(edges(&synthetic("pub(crate) struct S;\n")), vec![]);
}

#[test]
fn super_paths_and_mod_declarations_are_followed_into_files() {
    let dir = tree(&[
        ("lib.rs", LIB),
        ("model.rs", "mod deep;\n"),
        ("model/deep.rs", "mod deeper {\n    mod leaf;\n}\n"),
        (
            "model/deep/deeper/leaf.rs",
            "fn f() { super::super::super::super::plan::make(); }\n",
        ),
        ("plan/mod.rs", PLAN),
        ("plan/inner.rs", INNER),
        ("sampler/mod.rs", SAMPLER),
    ]);
    let f = lib_only(&dir);
    assert_eq!(edges(&f), up("plan"), "{f:?}");
    assert_eq!(f.files, 7);
    // A file no declaration reaches is reported, not silently skipped.
    let dir = tree(&[
        ("lib.rs", LIB),
        ("model.rs", ""),
        ("model/orphan.rs", "use crate::plan::Plan;\n"),
        ("plan/mod.rs", PLAN),
        ("plan/inner.rs", INNER),
        ("sampler/mod.rs", SAMPLER),
    ]);
    let f = lib_only(&dir);
    assert_eq!(f.unreached, vec!["model/orphan.rs".to_string()]);
}

#[test]
fn a_cycle_between_a_step_file_and_its_mod_rs_is_caught() {
    let cycle = tree(&[
        ("lib.rs", LIB),
        ("model.rs", ""),
        ("plan/mod.rs", PLAN),
        ("plan/inner.rs", INNER),
        (
            "sampler/mod.rs",
            "mod step;\npub use step::run;\npub struct Sampler;\nfn helper() {}\n",
        ),
        (
            "sampler/step.rs",
            "use super::*;\npub fn run() { helper() }\n",
        ),
    ]);
    let f = lib_only(&cycle);
    assert_eq!(
        f.cycles.iter().cloned().collect::<Vec<_>>(),
        vec![
            ("sampler/mod.rs".to_string(), "sampler/step.rs".to_string()),
            ("sampler/step.rs".to_string(), "sampler/mod.rs".to_string())
        ],
        "{f:?}"
    );
    // A step file that takes what mod.rs only re-exports from a third file is no cycle: the
    // path resolves to where the item is defined.
    let acyclic = tree(&[
        ("lib.rs", LIB),
        ("model.rs", ""),
        ("plan/mod.rs", PLAN),
        ("plan/inner.rs", INNER),
        (
            "sampler/mod.rs",
            "mod config;\nmod step;\npub use config::Config;\npub fn go() { step::run() }\n",
        ),
        ("sampler/config.rs", "pub struct Config;\n"),
        (
            "sampler/step.rs",
            "use super::Config;\npub fn run() { let _ = Config; }\n",
        ),
    ]);
    let f = lib_only(&acyclic);
    assert!(f.cycles.is_empty(), "{f:?}");
}

/// The workspace's packages as `cargo metadata` lists them (declared dependencies and targets).
fn workspace_packages() -> Vec<serde_json::Value> {
    let v = imc_tests::cargo_metadata();
    v["packages"].as_array().expect("packages").clone()
}

/// (dependency name, kind: normal, dev or build) of workspace package `name`.
fn dependencies_of(packages: &[serde_json::Value], name: &str) -> Vec<(String, String)> {
    let p = packages
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no package {name} in the workspace"));
    p["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .map(|d| {
            let kind = d["kind"].as_str().unwrap_or("normal").to_string();
            (d["name"].as_str().expect("name").to_string(), kind)
        })
        .collect()
}

/// The tool crates sit on top of the product: imc-user names neither in any dependency section
/// (normal, dev or build), so no product module can import them; they take imc-user's library.
/// The product's only targets are its library and `imc` (a tool binary or bench in imc-user
/// would build into the product crate again).
#[test]
fn the_product_depends_on_no_tool_crate_and_the_tools_depend_on_it() {
    const TOOLS: &[&str] = &["imc-sim", "imc-tools"];
    let packages = workspace_packages();
    let product = dependencies_of(&packages, "imc-user");
    assert!(
        product.iter().any(|(d, _)| d == "imc-common"),
        "{product:?}"
    );
    let wrong: Vec<_> = product
        .iter()
        .filter(|(d, _)| TOOLS.contains(&d.as_str()))
        .collect();
    assert!(
        wrong.is_empty(),
        "imc-user depends on a tool crate: {wrong:?}"
    );
    for tool in TOOLS {
        let deps = dependencies_of(&packages, tool);
        assert!(
            deps.contains(&("imc-user".to_string(), "normal".to_string())),
            "{tool} is built on imc-user's library: {deps:?}"
        );
    }
    // The simulator is below the tools: imc-tools uses it, never the other way.
    let sim = dependencies_of(&packages, "imc-sim");
    assert!(!sim.iter().any(|(d, _)| d == "imc-tools"), "{sim:?}");
    let user = packages.iter().find(|p| p["name"] == "imc-user").unwrap();
    let mut targets: Vec<String> = user["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter(|t| t["kind"] != serde_json::json!(["custom-build"]))
        .map(|t| {
            format!(
                "{} {}",
                t["kind"][0].as_str().unwrap(),
                t["name"].as_str().unwrap()
            )
        })
        .collect();
    targets.sort();
    assert_eq!(targets, ["bin imc", "lib imc"], "imc-user's targets");
}
