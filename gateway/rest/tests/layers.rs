//! The gateway's layering, read from its source: no import circle between its modules, route
//! groups that never import one another, and a bound on `src/` lines that can only go down.
//!
//! A small hand parser (no compiler involved): every `crate::…`, `super::…` and child-module
//! path in a file is an edge from that file's module to the module the path names. Inline
//! `mod tests { … }` blocks count like the rest of their file (a test that imports another
//! group is still a dependency a reader has to follow).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `src/` may hold at most this many lines (issue 14: 9 000); lower this number whenever
/// the gateway shrinks, never raise it. Raised once, by 240, when the gateway became the
/// config's one writer for every process (issue 29); lowered to 8 980 when `/metrics` moved
/// into its own crate (`gateway/metrics`, issue 30). Raised a second time, by 70, for three
/// owner-facing features of issue 31 (and one source for the running version) whose logic lives outside `src/` (the LAN settings'
/// rules in `svcos_common::networkd`/`Ipv4Config`, the merged log in `svcos-logs`, the setup
/// hold in hw-agent) but whose handlers and `/ws` topic are the gateway's; 15 came back when
/// the log tail's setup moved into `svcos-logs` (`Follow`). Raised a third time,
/// by 45, when Stratum V2 job declaration (issue 34) turned three `planned!` rows into routes:
/// thin relays whose rules live in `JdConfig::validate`, stratum-agent and `svcos-api-types`.
/// Raised a fourth time, by 10, for the two home-swarm routes of issue 34 (two relays and their
/// imports; the swarm, its wire format and split rule live in the tuner's `power::swarm`), and
/// set to the count then; raised by 26 for the swarm's mDNS discovery, the task that hands the
/// responder's finds (`svcos-mdns`) to the tuner over gRPC.
const MAX_SRC_LINES: usize = 9_113;

/// Modules that are one node of the graph however many files they span (their inside is
/// their own business).
const UNITS: &[&str] = &[];

/// Circles still to be removed (each one strongly connected set of modules, sorted): none are
/// left. The test fails on a circle not listed here and on an entry that is no longer a circle,
/// so this list can only shrink; keep it empty.
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// Route-group imports still to be removed (`from -> to`), under the same only-shrinks rule.
const KNOWN_GROUP_EDGES: &[&str] = &[];

fn src_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/handlers/operations/home.rs` → `handlers::operations::home`; `lib.rs` → `crate`.
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src_dir()).expect("file under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    if parts.is_empty() {
        "crate".into()
    } else {
        parts.join("::")
    }
}

/// The graph node of a module: units collapse to their top.
fn node_of(module: &str) -> String {
    for unit in UNITS {
        if module == *unit || module.starts_with(&format!("{unit}::")) {
            return (*unit).to_string();
        }
    }
    module.to_string()
}

fn parent(module: &str) -> String {
    match module.rsplit_once("::") {
        Some((p, _)) => p.to_string(),
        None => "crate".into(),
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Source without comments and string literals (so doc links and messages are no edges).
fn strip(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '"' && !(i > 0 && chars[i - 1] == '\'') {
            // A raw string `r#"…"#` cannot hold a path worth counting either.
            let raw_hashes = {
                let mut j = i;
                let mut n = 0;
                while j > 0 && chars[j - 1] == '#' {
                    j -= 1;
                    n += 1;
                }
                (j > 0 && chars[j - 1] == 'r').then_some(n)
            };
            i += 1;
            while i < chars.len() {
                if raw_hashes.is_none() && chars[i] == '\\' {
                    i += 2;
                    continue;
                }
                if chars[i] == '"' {
                    let n = raw_hashes.unwrap_or(0);
                    if (1..=n).all(|k| chars.get(i + k) == Some(&'#')) {
                        i += 1 + n;
                        break;
                    }
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Expand `use` trees: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    // Drop renames (`x as y`) and whitespace.
    let mut spaced = String::with_capacity(tree.len() * 2);
    for c in tree.chars() {
        if matches!(c, '{' | '}' | ',') {
            spaced.extend([' ', c, ' ']);
        } else {
            spaced.push(c);
        }
    }
    let mut words = spaced.split_whitespace();
    let mut tree = String::new();
    while let Some(w) = words.next() {
        if w == "as" {
            words.next();
        } else {
            tree.push_str(w);
        }
    }
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand_use(p)
                .into_iter()
                .map(|s| format!("{prefix}{s}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every path of a file that starts at `crate`, `super`, `self` or a child module.
fn paths_in(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let mut paths = Vec::new();
    // `use` statements first (they may span lines and hold brace groups).
    let mut rest = code;
    let mut body = String::with_capacity(code.len());
    while let Some(pos) = rest.find("use ") {
        let at_word = rest[..pos].chars().last().is_none_or(|c| !is_ident(c));
        body.push_str(&rest[..pos]);
        if !at_word {
            body.push_str("use ");
            rest = &rest[pos + 4..];
            continue;
        }
        let after = &rest[pos + 4..];
        let end = after.find(';').unwrap_or(after.len());
        paths.extend(expand_use(&after[..end]));
        rest = &after[(end + 1).min(after.len())..];
    }
    body.push_str(rest);
    // Then paths in expressions, types and macro calls.
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if is_ident(chars[i]) && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':')) {
            let start = i;
            while i < chars.len() && (is_ident(chars[i]) || chars[i] == ':') {
                i += 1;
            }
            let token: String = chars[start..i].iter().collect();
            let head = token.split("::").next().unwrap_or("");
            let dollar = start > 0 && chars[start - 1] == '$';
            if token.contains("::")
                && !dollar
                && (head == "crate" || head == "super" || head == "self" || children.contains(head))
            {
                paths.push(token.trim_end_matches(':').to_string());
            }
        } else {
            i += 1;
        }
    }
    paths
}

struct Crate {
    modules: BTreeSet<String>,
    /// Root items re-exported from a module (`pub use state::AppState`) and exported macros.
    root_items: BTreeMap<String, String>,
}

impl Crate {
    /// The module a path names (the longest module prefix), from `module`'s point of view.
    fn resolve(&self, module: &str, path: &str, children: &BTreeSet<String>) -> Option<String> {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let (mut base, mut i) = match segs.first()? {
            &"crate" => (String::from("crate"), 1),
            &"self" => (module.to_string(), 1),
            &"super" => {
                let mut m = parent(module);
                let mut i = 1;
                while segs.get(i) == Some(&"super") {
                    m = parent(&m);
                    i += 1;
                }
                (m, i)
            }
            head if children.contains(*head) => (module.to_string(), 0),
            _ => return None,
        };
        let mut found = base.clone();
        if base == "crate"
            && let Some(first) = segs.get(i)
            && let Some(owner) = self.root_items.get(*first)
        {
            return Some(owner.clone());
        }
        while let Some(seg) = segs.get(i) {
            let next = if base == "crate" {
                (*seg).to_string()
            } else {
                format!("{base}::{seg}")
            };
            if !self.modules.contains(&next) {
                break;
            }
            found = next.clone();
            base = next;
            i += 1;
        }
        Some(found)
    }
}

fn declared_children(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The code before the first inline `mod name {`, and that module's name and code.
fn split_inline_mod(code: &str) -> (&str, (String, &str)) {
    let mut from = 0;
    while let Some(pos) = code[from..].find("mod ") {
        let at = from + pos;
        from = at + 4;
        if code[..at].chars().last().is_some_and(is_ident) {
            continue;
        }
        let name: String = code[at + 4..]
            .chars()
            .take_while(|c| is_ident(*c))
            .collect();
        let after = code[at + 4 + name.len()..].trim_start();
        if !name.is_empty() && after.starts_with('{') {
            return (&code[..at], (name, &code[at..]));
        }
    }
    (code, (String::new(), ""))
}

struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
    lines: usize,
}

fn build() -> Graph {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let mut sources = Vec::new();
    let mut lines = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        lines += text.lines().count();
        sources.push((module_of(f), text));
    }
    let modules: BTreeSet<String> = sources.iter().map(|(m, _)| m.clone()).collect();
    let mut root_items = BTreeMap::new();
    for (module, text) in &sources {
        let mut exported = false;
        for line in text.lines() {
            let l = line.trim();
            if l == "#[macro_export]" {
                exported = true;
            } else if let Some(rest) = l.strip_prefix("macro_rules! ") {
                if exported {
                    let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
                    root_items.insert(name, module.clone());
                }
                exported = false;
            }
            if module == "crate"
                && let Some(path) = l.strip_prefix("pub use ")
                && let Some((m, item)) = path.trim_end_matches(';').rsplit_once("::")
            {
                root_items.insert(item.to_string(), m.to_string());
            }
        }
    }
    let krate = Crate {
        modules,
        root_items,
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &sources {
        let code = strip(text);
        let children = declared_children(&code);
        let from = node_of(module);
        edges.entry(from.clone()).or_default();
        // An inline module (`mod tests { … }`, always last in this crate) sees `super` as
        // its file's module.
        let (outer, inner) = split_inline_mod(&code);
        let inner_module = format!("{module}::{}", inner.0);
        let scopes = [
            (module.as_str(), outer, &children),
            (inner_module.as_str(), inner.1, &BTreeSet::new()),
        ];
        for (scope, part, kids) in scopes {
            for path in paths_in(part, kids) {
                if let Some(target) = krate.resolve(scope, &path, kids) {
                    let to = node_of(&target);
                    if to != from {
                        edges.entry(from.clone()).or_default().insert(to);
                    }
                }
            }
        }
    }
    Graph { edges, lines }
}

/// Strongly connected sets of more than one module (Tarjan), each sorted.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        w.on_stack.insert(v);
        let targets: Vec<&'a str> = w
            .edges
            .get(v)
            .map(|s| s.iter().map(String::as_str).collect())
            .unwrap_or_default();
        for t in targets {
            if !w.index.contains_key(t) {
                visit(w, t);
                let low = w.low[v].min(w.low[t]);
                w.low.insert(v, low);
            } else if w.on_stack.contains(t) {
                let low = w.low[v].min(w.index[t]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut set = Vec::new();
            while let Some(x) = w.stack.pop() {
                w.on_stack.remove(x);
                set.push(x.to_string());
                if x == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                w.out.push(set);
            }
        }
    }
    let mut w = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.out.sort();
    w.out
}

/// One concrete cycle through a circle's modules, for the failure message.
fn one_cycle(edges: &BTreeMap<String, BTreeSet<String>>, set: &[String]) -> String {
    let inside: BTreeSet<&str> = set.iter().map(String::as_str).collect();
    let start = set[0].as_str();
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for t in edges.get(v).into_iter().flatten() {
            let t = t.as_str();
            if t == start {
                let mut path = vec![start, v];
                let mut x = v;
                while let Some(p) = prev.get(x) {
                    path.push(p);
                    x = p;
                }
                path.pop();
                path.reverse();
                let mut s: Vec<&str> = vec![start];
                s.extend(path);
                s.push(start);
                s.dedup();
                return s.join(" -> ");
            }
            if inside.contains(t) && t != start && !prev.contains_key(t) {
                prev.insert(t, v);
                queue.push_back(t);
            }
        }
    }
    set.join(", ")
}

/// Route-group modules: `handlers::x` and `handlers::operations::x` (the parents hold only
/// shared helpers).
fn is_group(module: &str) -> bool {
    let Some(rest) = module.strip_prefix("handlers::") else {
        return false;
    };
    match rest.strip_prefix("operations::") {
        Some(sub) => !sub.contains("::"),
        None => rest != "operations" && !rest.contains("::"),
    }
}

#[test]
fn no_import_circles() {
    let graph = build();
    let found = circles(&graph.edges);
    let known: Vec<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    let mut problems = Vec::new();
    for set in &found {
        if !known.contains(set) {
            problems.push(format!(
                "import circle among {set:?}; for example {}",
                one_cycle(&graph.edges, set)
            ));
        }
    }
    for set in &known {
        if !found.contains(set) {
            problems.push(format!(
                "KNOWN_CIRCLES lists {set:?}, which is no longer exactly a circle: update the list (it only shrinks)"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn route_groups_never_import_each_other() {
    let graph = build();
    let mut found = BTreeSet::new();
    for (from, tos) in &graph.edges {
        for to in tos {
            if is_group(from) && is_group(to) {
                found.insert(format!("{from} -> {to}"));
            }
        }
    }
    let known: BTreeSet<String> = KNOWN_GROUP_EDGES.iter().map(|s| s.to_string()).collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty(),
        "route groups import each other (move the shared item underneath): {new:?}"
    );
    assert!(
        gone.is_empty(),
        "KNOWN_GROUP_EDGES lists imports that are gone: remove {gone:?}"
    );
}

#[test]
fn src_lines_within_bound() {
    let graph = build();
    println!("gateway/rest/src: {} lines", graph.lines);
    assert!(
        graph.lines <= MAX_SRC_LINES,
        "gateway/rest/src has {} lines, above the bound {MAX_SRC_LINES}",
        graph.lines
    );
}

#[test]
fn the_parser_sees_known_edges() {
    // The parser itself: a module with an obvious dependency must show it, so an empty graph
    // can never pass as "no circles".
    let graph = build();
    let lib = &graph.edges["crate"];
    assert!(lib.contains("registry"), "{lib:?}");
    assert!(lib.contains("guard"), "{lib:?}");
    assert!(
        graph.edges["handlers::tuning"].contains("handlers"),
        "{:?}",
        graph.edges["handlers::tuning"]
    );
    assert_eq!(
        expand_use("crate::{a, b::{c, d}}"),
        ["crate::a", "crate::b::c", "crate::b::d"]
    );
}
