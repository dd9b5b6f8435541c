//! The hot-text list turns into the linker script the release link uses (build.rs): every pattern
//! becomes one rule, and a line that a linker would read as something else stops the build.

#[allow(dead_code)]
#[path = "../build.rs"]
mod build;

const LIST: &str = include_str!("../hot-text.txt");

fn patterns() -> Vec<&'static str> {
    LIST.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn every_listed_pattern_is_one_rule_of_an_inserted_section() {
    let script = build::hot_text_script(LIST);
    assert!(
        script.starts_with("SECTIONS { .text.hot : {\n"),
        "{}",
        &script[..60]
    );
    assert!(script.ends_with("} } INSERT BEFORE .text;\n"));
    let rules: Vec<&str> = script
        .lines()
        .filter_map(|l| l.strip_prefix("  *(")?.strip_suffix(')'))
        .collect();
    assert_eq!(rules, patterns());
    // The entry point and the runtime every service polls are on the list (v0 names with the
    // crates' disambiguators wildcarded), so the list matches today's build at all.
    assert!(rules.contains(&".text._RNvCs*_5svcos4main"));
    assert!(rules.iter().any(|r| r.contains("5tokio7runtime")));
    let unique: std::collections::HashSet<_> = rules.iter().collect();
    assert_eq!(unique.len(), rules.len(), "a pattern is listed twice");
}

#[test]
#[should_panic(expected = "hot-text.txt:2: not a section name or pattern")]
fn a_line_the_linker_would_misread_stops_the_build() {
    build::hot_text_script(".text.fine\n.text.a) *(.data\n");
}

#[test]
#[should_panic(expected = "not a section name or pattern: .data.x")]
fn only_text_sections_are_listed() {
    build::hot_text_script("# comment\n\n.data.x\n");
}
