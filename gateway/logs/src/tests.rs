//! One test per rule of the view.

use super::*;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn append(dir: &Path, name: &str, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join(name))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn query(pairs: &[(&str, &str)]) -> LogQuery {
    let mut q = LogQuery::default();
    for (k, v) in pairs {
        let v = Some(v.to_string());
        match *k {
            "service" => q.service = v,
            "level" => q.level = v,
            "q" => q.q = v,
            "since" => q.since = v,
            "limit" => q.limit = v,
            "format" => q.format = v,
            _ => panic!("{k}"),
        }
    }
    q
}

#[test]
fn lines_give_time_level_and_message() {
    let cases = [
        // (raw, time_ms, level, message)
        (
            "2026-11-29T03:49:13.120Z  INFO pool connected url=stratum+tcp://h:3",
            1_795_924_153_120,
            "info",
            "pool connected url=stratum+tcp://h:3",
        ),
        (
            "2026-11-29T03:49:13.121Z  WARN conn{peer=1}: slow",
            1_795_924_153_121,
            "warn",
            "conn{peer=1}: slow",
        ),
        (
            "2026-11-29T03:49:13.122Z ERROR chain 1 lost",
            1_795_924_153_122,
            "error",
            "chain 1 lost",
        ),
        (
            "2026-11-29T03:49:13.123Z thread 'main' panicked at src/x.rs:1:1:",
            1_795_924_153_123,
            "error",
            "thread 'main' panicked at src/x.rs:1:1:",
        ),
        (
            "2026-11-29T03:49:13.124Z plain output Info",
            1_795_924_153_124,
            "info",
            "plain output Info",
        ),
        // No stamp (written before stamps existed): the previous line's time.
        (" DEBUG old line", 7, "debug", "old line"),
    ];
    for (raw, ms, level, message) in cases {
        let e = parse_line(ServiceName::HwAgent, raw, 7);
        assert_eq!(
            (e.time_ms, e.level, e.message.as_str()),
            (ms, level, message),
            "{raw}"
        );
        assert_eq!(e.service, "hw-agent");
    }
    let e = parse_line(ServiceName::HwAgent, cases[0].0, 0);
    assert_eq!(e.time, "2026-11-29T03:49:13.120Z");
}

#[test]
fn secrets_are_masked_in_every_form() {
    let cases = [
        ("login to stratum+tcp://rig:hunter2@pool:3333 ok", "hunter2"),
        ("GET /ws?token=abcdef123&x=1", "abcdef123"),
        ("redeem ticket=t-77, then", "t-77"),
        ("auth password=hunter2", "hunter2"),
        ("mqtt password: hunter2 set", "hunter2"),
        ("Authorization: Bearer sekrit-token", "sekrit-token"),
        ("config pool_password=\"hunter2\"", "hunter2"),
    ];
    for (line, secret) in cases {
        let masked = mask_secrets(line);
        assert!(!masked.contains(secret), "{line} -> {masked}");
        assert!(masked.contains("********"), "{line} -> {masked}");
    }
    // Words that only look like keys stay.
    assert_eq!(mask_secrets("passed 3 checks"), "passed 3 checks");
    assert_eq!(mask_secrets("tokens=3 issued"), "tokens=3 issued");
}

#[test]
fn services_merge_in_time_order_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "hw-agent.log.1",
        "2026-11-29T03:00:00.000Z  INFO board up\n",
    );
    write(
        d,
        "hw-agent.log",
        "2026-11-29T03:00:02.000Z  WARN fan 2 slow\n2026-11-29T03:00:04.000Z DEBUG tick\n",
    );
    write(
        d,
        "gateway.log",
        "2026-11-29T03:00:01.000Z  INFO listening\n2026-11-29T03:00:03.000Z ERROR auth down\n",
    );
    let all = body(d, &query(&[("level", "trace")])).unwrap();
    let order: Vec<_> = all
        .entries
        .iter()
        .map(|e| (e.service.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("hw-agent", "board up"),
            ("gateway", "listening"),
            ("hw-agent", "fan 2 slow"),
            ("gateway", "auth down"),
            ("hw-agent", "tick"),
        ]
    );
    assert_eq!(all.schema, "svcos.api.logs.v1");
    // Default level is info.
    assert_eq!(body(d, &LogQuery::default()).unwrap().count, 4);
    let warn = body(d, &query(&[("level", "warn")])).unwrap();
    assert_eq!(warn.count, 2);
    let gw = body(d, &query(&[("service", "gateway"), ("level", "trace")])).unwrap();
    assert!(gw.entries.iter().all(|e| e.service == "gateway"));
    let found = body(d, &query(&[("q", "FAN")])).unwrap();
    assert_eq!(found.entries[0].message, "fan 2 slow");
    let since = body(d, &query(&[("since", "2026-11-29T03:00:02Z")])).unwrap();
    assert_eq!(since.count, 2);
    let newest = body(d, &query(&[("limit", "2"), ("level", "trace")])).unwrap();
    assert!(newest.truncated);
    assert_eq!(newest.entries[1].message, "tick");
}

#[test]
fn bad_queries_name_their_field() {
    let cases = [
        ("service", "miner"),
        ("level", "loud"),
        ("since", "yesterday"),
        ("limit", "0"),
        ("limit", "5001"),
        ("limit", "x"),
    ];
    for (field, value) in cases {
        let q = query(&[(field, value)]);
        let err = q.filter().and_then(|_| q.limit(1, MAX_LIMIT)).unwrap_err();
        assert_eq!(err.field, field, "{value}");
    }
    assert_eq!(
        query(&[("format", "xml")]).format().unwrap_err().field,
        "format"
    );
    assert_eq!(
        query(&[("q", &"x".repeat(201))])
            .filter()
            .unwrap_err()
            .field,
        "q"
    );
}

#[test]
fn downloads_are_text_or_ndjson() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "auth.log",
        "2026-11-29T03:00:00.000Z  INFO session created password=hunter2\n",
    );
    let (text, media, name) = download(dir.path(), &LogQuery::default(), 0).unwrap();
    assert_eq!(media, "text/plain; charset=utf-8");
    assert_eq!(
        text,
        "2026-11-29T03:00:00.000Z  INFO auth: session created password=********\n"
    );
    assert!(name.ends_with(".txt") && !name.contains(':'), "{name}");
    let (nd, media, _) = download(dir.path(), &query(&[("format", "ndjson")]), 0).unwrap();
    assert_eq!(media, "application/x-ndjson");
    let v: serde_json::Value = serde_json::from_str(nd.trim()).unwrap();
    assert_eq!(v["service"], "auth");
    assert_eq!(v["level"], "info");
    assert_eq!(v["time_ms"], 1_795_921_200_000i64);
}

#[test]
fn a_tail_sends_only_new_complete_lines_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "tuner.log", "2026-11-29T03:00:00.000Z  INFO old\n");
    let mut tail = Tail::new(d, Filter::default());
    assert!(tail.poll().is_empty(), "what was there before is not sent");
    append(
        d,
        "tuner.log",
        "2026-11-29T03:00:01.000Z  INFO one\n2026-11-29T03:00:02.000Z  INFO tw",
    );
    let got: Vec<_> = tail.poll().into_iter().map(|e| e.message).collect();
    assert_eq!(got, ["one"], "a partial line waits");
    append(d, "tuner.log", "o\n");
    // The supervisor rotates: the file becomes .log.1, a new .log starts.
    append(d, "tuner.log", "2026-11-29T03:00:03.000Z  INFO three\n");
    std::fs::rename(d.join("tuner.log"), d.join("tuner.log.1")).unwrap();
    write(d, "tuner.log", "2026-11-29T03:00:04.000Z  WARN four\n");
    append(d, "auth.log", "2026-11-29T03:00:03.500Z  INFO other\n");
    let got: Vec<_> = tail.poll().into_iter().map(|e| e.message).collect();
    assert_eq!(got, ["two", "three", "other", "four"]);
    assert!(tail.poll().is_empty());
}

#[test]
fn a_tail_applies_its_filter() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let filter = query(&[("service", "auth"), ("level", "warn")])
        .filter()
        .unwrap();
    let mut tail = Tail::new(d, filter);
    append(d, "auth.log", "2026-11-29T03:00:00.000Z  INFO quiet\n");
    append(d, "auth.log", "2026-11-29T03:00:01.000Z  WARN loud\n");
    append(
        d,
        "gateway.log",
        "2026-11-29T03:00:01.000Z ERROR elsewhere\n",
    );
    let got: Vec<_> = tail.poll().into_iter().map(|e| e.message).collect();
    assert_eq!(got, ["loud"]);
    let frame: serde_json::Value = serde_json::from_str(&ws_frame(&parse_line(
        ServiceName::Auth,
        "2026-11-29T03:00:01.000Z  WARN loud",
        0,
    )))
    .unwrap();
    assert_eq!(frame["type"], "log");
    assert_eq!(frame["schema"], "svcos.ws.log.v1");
    assert_eq!(frame["level"], "warn");
}
