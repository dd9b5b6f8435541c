//! Thread scheduling policy: the real-time loops (hw-agent's chains, hw-sim's simulated UARTs)
//! ask for SCHED_FIFO where the process may have it.

/// Put the calling thread under SCHED_FIFO at `priority`, or back to the normal policy with
/// `None` (threads inherit their creator's policy). Best effort: without the privilege nothing
/// changes. The kernel's RT throttling keeps 5 % of the CPU for everything else even if a bug
/// made an RT thread spin.
pub fn set_scheduling(priority: Option<i32>, thread: &str) {
    let (policy, prio) = match priority {
        Some(p) => (libc::SCHED_FIFO, p),
        None => (libc::SCHED_OTHER, 0),
    };
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the
    // calling thread, and the call has no other memory effects.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc != 0 {
        tracing::debug!(thread, error = %std::io::Error::last_os_error(), "scheduling policy unchanged");
    }
}
