//! Allocator settings every svcOS process shares, for the whole-stack memory target (eight
//! processes, PSS summed): glibc's malloc is tuned to keep less memory it no longer uses.
//!
//! - **One arena per process** (`M_ARENA_MAX` = 1 unless [`ARENA_ENV`] says otherwise). glibc
//!   gives each thread that allocates its own arena (up to 8 × cores); a chain thread, a blocking
//!   pool thread for a state write, or argon2's hashing thread then keeps a heap of its own with
//!   its own free fragments. Our processes allocate little off the runtime thread, so sharing
//!   one arena costs no measurable contention.
//! - **Give freed pages back after a burst.** glibc returns memory only from the top of the heap;
//!   free chunks below a live one stay resident, so a burst of requests leaves a process larger
//!   than before. [`spawn_trimmer`] calls `malloc_trim(0)` (which `madvise`s every free page
//!   away) every [`TRIM_INTERVAL`] ([`TRIM_ENV`]=0 turns it off).
//! - **Large blocks straight from and back to the OS** (`M_MMAP_THRESHOLD` pinned at
//!   [`MMAP_THRESHOLD`] unless [`MMAP_ENV`] says otherwise). glibc's default threshold is
//!   dynamic: once a block above it is freed, the threshold rises to that block's size (up to
//!   32 MiB) and so does the trim threshold, so the next large buffer (argon2's 19 MiB, a
//!   diagnostics archive, a big JSON body) comes from the heap and its pages stay resident
//!   until the next trim. Pinning the threshold turns the adjustment off: such a block is an
//!   `mmap` of its own and is unmapped when freed.
//! - **Give back the start-up stack.** A service's main thread runs its runtime, but before that
//!   it parses arguments and the config and sets up logging, which reach 60–90 KiB deep, while
//!   steady-state polling needs a fraction of that. Touched stack pages stay resident for the
//!   life of the process, so [`trim_stack`] (called by the trimmer on the main thread) discards
//!   the pages well below the current frame; should the stack grow again, the kernel hands out
//!   fresh zero pages as for any first touch.
//!
//! Other allocators (musl's) ignore all this; the functions are no-ops there.

use std::time::Duration;

use crate::Shutdown;

/// Environment override of the arena count (`MALLOC_ARENA_MAX` is glibc's own and wins too).
pub const ARENA_ENV: &str = "SVCOS_MALLOC_ARENAS";
/// Set to `0` to turn the periodic trim off (to measure what it saves).
pub const TRIM_ENV: &str = "SVCOS_MALLOC_TRIM";
/// Environment override of the mmap threshold in bytes; `0` keeps glibc's dynamic threshold.
pub const MMAP_ENV: &str = "SVCOS_MALLOC_MMAP_THRESHOLD";
/// Blocks at least this large get their own mapping (glibc's initial value, kept fixed).
pub const MMAP_THRESHOLD: i32 = 128 * 1024;
/// How often an idle process trims at most.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(5);

/// Set the allocator up; call first thing in `main`, before any thread exists.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let threshold = std::env::var(MMAP_ENV)
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(MMAP_THRESHOLD);
        if threshold > 0 {
            // SAFETY: as below; a positive threshold is a valid value (glibc caps it itself).
            unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) };
        }
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let arenas = std::env::var(ARENA_ENV)
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(1);
        // SAFETY: mallopt only changes allocator tuning, with a valid parameter and value; it is
        // called before the process starts other threads.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    }
}

/// Return free heap pages to the OS now. Returns whether any memory was released.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim has no preconditions; it only releases unused allocator memory.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Bytes kept below the caller's frame by [`trim_stack`]: room for the frames of the `madvise`
/// call itself (a few hundred bytes) and a signal handler's frame (tokio's handler only writes
/// to a pipe), several times what either needs.
const STACK_KEEP: usize = 8 * 1024;

/// Discard the main thread's stack pages more than [`STACK_KEEP`] below the caller's frame.
/// Returns the bytes discarded (0 off the main thread, or when nothing lies that deep).
///
/// Sound because everything below the stack pointer is dead by the ABI (beyond the 128-byte red
/// zone, which the margin covers many times over), and `MADV_DONTNEED` on private anonymous
/// memory only turns those pages back into zero-fill-on-demand.
pub fn trim_stack() -> usize {
    #[cfg(target_os = "linux")]
    {
        // Only the main thread's stack is the `[stack]` mapping; other threads have their own.
        if nix::unistd::gettid() != nix::unistd::getpid() {
            return 0;
        }
        let Some(low) = main_stack_low() else {
            return 0;
        };
        let marker = 0u8;
        let here = std::hint::black_box(&marker) as *const u8 as usize;
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .map_or(4096, |p| p as usize);
        let high = here.saturating_sub(STACK_KEEP) & !(page - 1);
        if high <= low {
            return 0;
        }
        let len = high - low;
        // SAFETY: [low, high) is inside this thread's own stack mapping and at least STACK_KEEP
        // below the current frame, so no live frame, local or signal frame is there; discarding
        // private anonymous pages makes them read back as zeros, which nothing reads before
        // writing (a stack is written before it is read).
        let rc = unsafe { libc::madvise(low as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc == 0 { len } else { 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// The lowest address of the `[stack]` mapping (the main thread's stack grows down to it).
#[cfg(target_os = "linux")]
fn main_stack_low() -> Option<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (range, _) = line.split_once(' ')?;
    let (low, _) = range.split_once('-')?;
    usize::from_str_radix(low, 16).ok()
}

/// Trim every [`TRIM_INTERVAL`] on the current runtime until shutdown. The trim is a walk over
/// free chunks of a heap of a few megabytes (tens of microseconds), rare enough not to show in
/// request latency percentiles.
pub fn spawn_trimmer(shutdown: Shutdown) {
    if std::env::var(TRIM_ENV).is_ok_and(|v| v == "0") {
        return;
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TRIM_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    trim();
                    trim_stack();
                }
                _ = shutdown.wait() => return,
            }
        }
    });
}

/// A bounded ring whose memory is claimed at start: room for `cap` items, each slot written
/// once, then emptied (the capacity and its resident pages stay). A ring sized for an hour of
/// 1 Hz samples otherwise grows the process page by page for that hour, which a memory soak
/// cannot tell from a leak; claimed up front, the footprint after boot is the final one.
pub fn claimed_ring<T: Clone>(cap: usize, fill: T) -> std::collections::VecDeque<T> {
    let mut ring = std::collections::VecDeque::with_capacity(cap);
    ring.extend(std::iter::repeat_n(fill, cap));
    ring.clear();
    ring
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_ring_is_empty_and_never_grows_when_filled() {
        let mut ring = claimed_ring(1000, [7u64; 4]);
        assert!(ring.is_empty());
        let cap = ring.capacity();
        assert!(cap >= 1000);
        for i in 0..5000u64 {
            if ring.len() == 1000 {
                ring.pop_front();
            }
            ring.push_back([i; 4]);
        }
        assert_eq!(ring.capacity(), cap);
        assert_eq!(ring.front(), Some(&[4000; 4]));
    }
}
