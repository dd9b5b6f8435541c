//! `alloc::trim_stack` on a real main thread (`harness = false`: libtest would run the test on a
//! thread of its own, whose stack is not the `[stack]` mapping).

use std::hint::black_box;

/// Resident KiB of the `[stack]` mapping, from this process's smaps.
fn stack_rss_kib() -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut in_stack = false;
    for line in smaps.lines() {
        let header = line
            .split_once(' ')
            .is_some_and(|(range, _)| range.contains('-') && !range.ends_with(':'));
        if header {
            in_stack = line.ends_with("[stack]");
        } else if in_stack && let Some(v) = line.strip_prefix("Rss:") {
            return v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .expect("Rss value");
        }
    }
    panic!("no [stack] mapping");
}

/// Touch about `kib` KiB of stack below the caller.
#[inline(never)]
fn deep(kib: usize) -> u8 {
    let mut page = [0u8; 1024];
    page[black_box(7)] = kib as u8;
    if kib == 0 {
        return black_box(page)[7];
    }
    black_box(page)[7].wrapping_add(deep(kib - 1))
}

fn main() {
    black_box(deep(512));
    let before = stack_rss_kib();
    assert!(before >= 512, "the recursion touched {before} KiB");
    let freed = svcos_common::alloc::trim_stack();
    let after = stack_rss_kib();
    assert!(
        freed >= 400 * 1024,
        "trim_stack discarded only {freed} bytes"
    );
    assert!(
        after + 400 <= before,
        "[stack] resident {before} KiB before the trim, {after} KiB after"
    );
    // The discarded pages are ordinary stack again: going deep once more works and reads zeros
    // where it has not written.
    black_box(deep(512));
    // Off the main thread there is nothing to trim.
    let other = std::thread::spawn(svcos_common::alloc::trim_stack)
        .join()
        .expect("thread");
    assert_eq!(other, 0);
    println!("stack_trim: {before} KiB -> {after} KiB resident ({freed} bytes discarded)");
}
