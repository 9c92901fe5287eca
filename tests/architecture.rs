//! The layers of `src/`, kept by a test (ARCHITECTURE.md, "Layers").
//!
//! Reads every file of `src/` with `syn`, resolves each path it names (`use` trees, and paths in
//! code that start at `crate`, `super`, `self` or a child module) to the file that defines the
//! item, following `pub use` re-exports to their source, and checks two rules on that graph:
//! no two files reach each other (no import cycle), and no file imports from a layer above its
//! own. Test code (`#[cfg(test)]` items) is left out: a test may reach anything.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The layers, bottom up, as module-path prefixes. A file belongs to the layer of the longest
/// prefix naming it. Keep in step with ARCHITECTURE.md's diagram.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "nouns",
        &[
            "model",
            "clock",
            "filter",
            "schedule",
            "metrics",
            "log_throttle",
            "strict_json",
        ],
    ),
    ("store", &["store"]),
    ("engine", &["engine"]),
    ("rust api", &["send", "client", "io", "job"]),
    ("endpoints, webhooks", &["endpoints", "webhooks"]),
    ("http", &["http"]),
    (
        "app",
        &[
            "config",
            "server",
            "app",
            "remote",
            "reference_jobs",
            "bench",
            "lib",
            "main",
        ],
    ),
];

/// One file of `src/`: its module path and what it declares.
#[derive(Debug, Default)]
struct Module {
    file: String,
    /// Child modules declared with `mod name;` (files of their own).
    children: BTreeSet<String>,
    /// `pub use` items: the name they export → the absolute path they re-export.
    exports: HashMap<String, Vec<String>>,
    /// Glob re-exports (`pub use path::*`).
    globs: Vec<Vec<String>>,
    /// Absolute paths this file names (outside test code).
    uses: Vec<Vec<String>>,
}

fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod") | Some("lib") | Some("main")
    ) {
        let last = parts.pop().expect("non-empty");
        if parts.is_empty() {
            parts.push(last); // `lib` and `main` are modules of their own here
        }
    }
    parts
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .map(|m| m.path().is_ident("test"))
                .unwrap_or(false)
    })
}

/// Collects the paths of one file, relative to it (`crate::…`, `super::…`, `self::…`, or a
/// first segment to be checked against the file's child modules and imports).
struct Collector<'a> {
    here: &'a [String],
    children: &'a BTreeSet<String>,
    /// Names brought in by `use` (alias → absolute path), for paths in code such as `ops::f()`.
    aliases: HashMap<String, Vec<String>>,
    paths: Vec<Vec<String>>,
}

impl Collector<'_> {
    /// Turns a path as written into an absolute one, or `None` for external crates and
    /// names that are not modules of this crate.
    fn absolute(&self, segs: &[String]) -> Option<Vec<String>> {
        let first = segs.first()?;
        match first.as_str() {
            "crate" => Some(segs[1..].to_vec()),
            "self" => Some(self.here.iter().chain(&segs[1..]).cloned().collect()),
            "super" => {
                let mut base = self.here.to_vec();
                let mut rest = segs;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                Some(base)
            }
            name if self.children.contains(name) => {
                Some(self.here.iter().chain(segs).cloned().collect())
            }
            name => self
                .aliases
                .get(name)
                .map(|abs| abs.iter().chain(&segs[1..]).cloned().collect()),
        }
    }

    fn use_tree(
        &self,
        prefix: &mut Vec<String>,
        tree: &syn::UseTree,
        out: &mut Vec<(String, Vec<String>)>,
    ) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                let name = n.ident.to_string();
                if name != "self" {
                    full.push(name.clone());
                }
                let alias = if name == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    name
                };
                out.push((alias, full));
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                out.push((r.rename.to_string(), full));
            }
            syn::UseTree::Glob(_) => out.push(("*".into(), prefix.clone())),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, out);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => &[],
        };
        if is_test_only(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)`, `pub(in crate::x)`: who may see an item, not what it uses.
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segs: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segs.len() > 1 || path.leading_colon.is_none() {
            if let Some(abs) = self.absolute(&segs) {
                if segs.len() > 1 || segs[0] == "crate" || segs[0] == "super" {
                    self.paths.push(abs);
                }
            }
        }
        syn::visit::visit_path(self, path);
    }
}

fn parse(src: &Path) -> BTreeMap<Vec<String>, Module> {
    let mut all = Vec::new();
    files(src, &mut all);
    let mut modules = BTreeMap::new();
    for file in all {
        let text = std::fs::read_to_string(&file).expect("readable file");
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let here = module_path(src, &file);
        // The crate root's paths are relative to the root itself.
        let base: Vec<String> = if here == ["lib"] || here == ["main"] {
            Vec::new()
        } else {
            here.clone()
        };
        let children: BTreeSet<String> = ast
            .items
            .iter()
            .filter_map(|i| match i {
                syn::Item::Mod(m) if m.content.is_none() => Some(m.ident.to_string()),
                _ => None,
            })
            .collect();
        let mut c = Collector {
            here: &base,
            children: &children,
            aliases: HashMap::new(),
            paths: Vec::new(),
        };
        let mut exports = HashMap::new();
        let mut globs = Vec::new();
        // `use` items first, so that paths in code can go through their names.
        for item in &ast.items {
            let syn::Item::Use(u) = item else { continue };
            if is_test_only(&u.attrs) {
                continue;
            }
            let mut found = Vec::new();
            c.use_tree(&mut Vec::new(), &u.tree, &mut found);
            let public = !matches!(u.vis, syn::Visibility::Inherited);
            for (alias, path) in found {
                let Some(abs) = c.absolute(&path) else {
                    continue;
                };
                if alias == "*" {
                    if public {
                        globs.push(abs.clone());
                    }
                } else {
                    if public {
                        exports.insert(alias.clone(), abs.clone());
                    }
                    c.aliases.insert(alias, abs.clone());
                }
                c.paths.push(abs);
            }
        }
        for item in &ast.items {
            if !matches!(item, syn::Item::Use(_)) {
                c.visit_item(item);
            }
        }
        let rel = file
            .strip_prefix(src.parent().expect("src has a parent"))
            .expect("under root")
            .display()
            .to_string();
        // Inline modules that only re-export (`pub mod query { pub use super::x::Y; }`): walked
        // like a child module, their paths counted as this file's.
        let mut inline = Vec::new();
        let mut inline_paths = Vec::new();
        for item in &ast.items {
            let syn::Item::Mod(m) = item else { continue };
            let Some((_, items)) = &m.content else {
                continue;
            };
            if is_test_only(&m.attrs) {
                continue;
            }
            let mut path = base.clone();
            path.push(m.ident.to_string());
            let none = BTreeSet::new();
            let inner = Collector {
                here: &path,
                children: &none,
                aliases: HashMap::new(),
                paths: Vec::new(),
            };
            let mut exports = HashMap::new();
            for item in items {
                let syn::Item::Use(u) = item else { continue };
                let mut found = Vec::new();
                inner.use_tree(&mut Vec::new(), &u.tree, &mut found);
                for (alias, p) in found {
                    if let Some(abs) = inner.absolute(&p) {
                        inline_paths.push(abs.clone());
                        exports.insert(alias, abs);
                    }
                }
            }
            inline.push((m.ident.to_string(), exports));
        }
        let mut uses = std::mem::take(&mut c.paths);
        uses.extend(inline_paths);
        drop(c);
        let mut children = children;
        for (name, exports) in inline {
            let key: Vec<String> = here.iter().chain([&name]).cloned().collect();
            children.insert(name);
            modules.insert(
                key,
                Module {
                    file: rel.clone(),
                    exports,
                    ..Module::default()
                },
            );
        }
        modules.insert(
            here,
            Module {
                file: rel,
                children,
                exports,
                globs,
                uses,
            },
        );
    }
    modules
}

/// The file that defines what `path` names: walk module by module, following re-exports.
fn resolve(
    modules: &BTreeMap<Vec<String>, Module>,
    path: &[String],
    depth: usize,
) -> Option<String> {
    if depth > 16 {
        return None;
    }
    let mut at: Vec<String> = Vec::new();
    for (i, seg) in path.iter().enumerate() {
        let module = modules.get(&at).or_else(|| {
            if at.is_empty() {
                modules.get(&vec!["lib".to_string()])
            } else {
                None
            }
        })?;
        if module.children.contains(seg) {
            at.push(seg.clone());
            continue;
        }
        if let Some(target) = module.exports.get(seg) {
            let mut full = target.clone();
            full.extend(path[i + 1..].iter().cloned());
            return resolve(modules, &full, depth + 1).or_else(|| Some(module.file.clone()));
        }
        for glob in &module.globs {
            let mut full = glob.clone();
            full.extend(path[i..].iter().cloned());
            if let Some(file) = resolve(modules, &full, depth + 1) {
                return Some(file);
            }
        }
        return Some(module.file.clone());
    }
    modules.get(&at).map(|m| m.file.clone())
}

fn layer_of(module: &[String]) -> usize {
    let name = module.join("::");
    let mut best: Option<(usize, usize)> = None;
    for (layer, (_, prefixes)) in LAYERS.iter().enumerate() {
        for p in *prefixes {
            if (name == *p || name.starts_with(&format!("{p}::")))
                && best.is_none_or(|(len, _)| p.len() > len)
            {
                best = Some((p.len(), layer));
            }
        }
    }
    best.map(|(_, l)| l)
        .unwrap_or_else(|| panic!("module {name} has no layer in LAYERS"))
}

type Graph = BTreeMap<String, BTreeSet<String>>;

fn graph() -> (Graph, HashMap<String, usize>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = parse(&src);
    let mut graph = Graph::new();
    let mut layers = HashMap::new();
    for (path, module) in &modules {
        layers.insert(module.file.clone(), layer_of(path));
        let deps = graph.entry(module.file.clone()).or_default();
        for used in &module.uses {
            if let Some(file) = resolve(&modules, used, 0) {
                if file != module.file {
                    if std::env::var("ARCH_WHY").is_ok_and(|w| module.file.contains(&w)) {
                        eprintln!("{} -> {file}: {}", module.file, used.join("::"));
                    }
                    deps.insert(file);
                }
            }
        }
    }
    (graph, layers)
}

/// Strongly connected components of more than one file (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: HashMap<&'g str, usize>,
        low: HashMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().expect("on the stack");
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        graph,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_file_of_src_imports_one_that_imports_it_back() {
    let (graph, _) = graph();
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .map(|comp| {
            let edges: Vec<String> = comp
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| comp.contains(b))
                        .map(move |b| format!("    {a} -> {b}"))
                })
                .collect();
            format!("  {} files:\n{}", comp.len(), edges.join("\n"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles in src/:\n{}",
        report.join("\n")
    );
}

#[test]
fn no_file_of_src_imports_from_a_layer_above_its_own() {
    let (graph, layers) = graph();
    let mut upward = Vec::new();
    for (a, deps) in &graph {
        for b in deps {
            if layers[b] > layers[a] {
                upward.push(format!(
                    "  {a} ({}) -> {b} ({})",
                    LAYERS[layers[a]].0, LAYERS[layers[b]].0
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports pointing up the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_an_import_cycle_and_an_upward_import() {
    // The rules above pass only if the graph is read at all: it must see these known edges.
    let (graph, layers) = graph();
    let lib = graph.get("src/lib.rs").expect("lib.rs is read");
    assert!(
        lib.iter().any(|f| f.starts_with("src/client")),
        "lib.rs re-exports the client"
    );
    assert!(layers["src/lib.rs"] > layers["src/store/mod.rs"]);
    let mut toy = Graph::new();
    toy.insert("a".into(), BTreeSet::from(["b".to_string()]));
    toy.insert("b".into(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&toy), vec![vec!["a".to_string(), "b".to_string()]]);
}
