//! Password rules and argon2id hashing off the async runtime.
//!
//! The hash is stored as a PHC string (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`), so the
//! parameters travel with it and a later change of [`owasp_params`] still verifies old hashes.

use std::sync::Arc;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use tokio::sync::Semaphore;

use crate::error::{AuthError, PasswordRule};

/// Longest password accepted, in bytes: argon2 hashes any length, but an unbounded input is a
/// free CPU and memory cost for whoever sends it.
pub const MAX_PASSWORD_BYTES: usize = 256;

/// Salt length in bytes (the argon2 crate's recommendation).
const SALT_BYTES: usize = 16;

/// Nice value of the threads that run argon2: a login must not take CPU time away from the
/// gateway answering `/api/status` on a two-core control board (per-thread on Linux). 19, the
/// lowest, so a waking runtime thread of any other process preempts the hash with the least
/// wake-up delay; an idle core still runs the hash at full speed, and with both cores busy a
/// hash gets about 1.5 % of one (a 30 ms hash then takes ~2 s, inside the gateway's 10 s login
/// deadline). SCHED_IDLE was tried before and starved logins under load.
const HASH_THREAD_NICE: libc::c_int = 19;

/// argon2id with m = 19456 KiB (19 MiB), t = 2 iterations, p = 1 lane: the first of OWASP's
/// Password Storage Cheat Sheet configurations for argon2id. About 30 ms per hash on the
/// development machine and 19 MiB of memory while it runs; the memory is returned to the OS
/// afterwards (the pinned mmap threshold of `svcos_common::alloc`).
pub fn owasp_params() -> Params {
    Params::new(19_456, 2, 1, None).expect("OWASP argon2 parameters are valid")
}

/// Check a new password against the rules: `min_chars` characters (config), at most
/// [`MAX_PASSWORD_BYTES`] bytes, no control characters.
pub fn check_rules(password: &str, min_chars: u32) -> Result<(), PasswordRule> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(PasswordRule::TooLong {
            max: MAX_PASSWORD_BYTES,
        });
    }
    if password.chars().count() < min_chars as usize {
        return Err(PasswordRule::TooShort { min: min_chars });
    }
    if password.chars().any(char::is_control) {
        return Err(PasswordRule::ControlCharacter);
    }
    Ok(())
}

/// Hash `password` with a fresh random salt into a PHC string. Blocking (tens of ms).
pub fn hash_blocking(password: &str, params: Params) -> Result<String, AuthError> {
    let mut salt = [0u8; SALT_BYTES];
    getrandom::fill(&mut salt)
        .map_err(|e| AuthError::Hash(format!("no randomness for the salt: {e}")))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| AuthError::Hash(e.to_string()))?;
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// Whether `password` matches the PHC string `phc`, using the parameters stored in it. The
/// final comparison is constant-time (password-hash's `Output` equality). Blocking.
pub fn verify_blocking(phc: &str, password: &str) -> Result<bool, AuthError> {
    let parsed = PasswordHash::new(phc).map_err(|e| AuthError::Hash(e.to_string()))?;
    match Argon2::default().verify_password(password.as_bytes(), &parsed) {
        Ok(()) => Ok(true),
        Err(argon2::password_hash::Error::Password) => Ok(false),
        Err(e) => Err(AuthError::Hash(e.to_string())),
    }
}

/// Whether `phc` parses as a PHC hash string (checked when loading the hash file).
pub fn is_valid_phc(phc: &str) -> Result<(), String> {
    let hash = PasswordHash::new(phc).map_err(|e| e.to_string())?;
    // A PHC string cut short after its salt still parses, but nothing can verify against it.
    match hash.hash {
        Some(output) if !output.as_bytes().is_empty() => Ok(()),
        _ => Err("the PHC string has no hash output".into()),
    }
}

/// Runs argon2 on tokio's blocking pool, at most `permits` at once, so the single runtime
/// thread keeps answering validations while logins hash.
#[derive(Debug, Clone)]
pub struct Hasher {
    permits: Arc<Semaphore>,
    params: Params,
}

impl Hasher {
    /// A hasher allowing `max_concurrent` hashes at once with `params` for new hashes.
    pub fn new(max_concurrent: u32, params: Params) -> Self {
        Hasher {
            permits: Arc::new(Semaphore::new(max_concurrent.max(1) as usize)),
            params,
        }
    }

    /// Hash a new password (waits for a permit first).
    pub async fn hash(&self, password: String) -> Result<String, AuthError> {
        let params = self.params.clone();
        self.run(move || hash_blocking(&password, params)).await
    }

    /// Verify a password against a stored PHC string (waits for a permit first).
    pub async fn verify(&self, phc: String, password: String) -> Result<bool, AuthError> {
        self.run(move || verify_blocking(&phc, &password)).await
    }

    /// Refuse further hashing (waiting callers get [`AuthError::ShuttingDown`]).
    pub fn close(&self) {
        self.permits.close();
    }

    async fn run<T, F>(&self, work: F) -> Result<T, AuthError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, AuthError> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| AuthError::ShuttingDown)?;
        tokio::task::spawn_blocking(move || {
            lower_thread_priority();
            work()
        })
        .await?
    }
}

/// Give the current (blocking-pool) thread a lower CPU priority, once per thread.
fn lower_thread_priority() {
    thread_local! {
        static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if LOWERED.with(|l| l.replace(true)) {
        return;
    }
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority only reads its integer arguments; it touches no memory of ours. On
    // Linux, PRIO_PROCESS with a thread id changes that thread's nice value only.
    let rc =
        unsafe { libc::setpriority(libc::PRIO_PROCESS as _, tid as libc::id_t, HASH_THREAD_NICE) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower hash thread priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cheap parameters: these tests are about the PHC round trip, not the cost.
    fn light() -> Params {
        Params::new(64, 1, 1, None).unwrap()
    }

    #[test]
    fn rules_table() {
        let long = "x".repeat(MAX_PASSWORD_BYTES + 1);
        let table: &[(&str, u32, Result<(), PasswordRule>)] = &[
            ("correct horse", 8, Ok(())),
            ("short", 8, Err(PasswordRule::TooShort { min: 8 })),
            // Characters, not bytes: four two-byte characters are still four.
            ("éééé", 5, Err(PasswordRule::TooShort { min: 5 })),
            (
                &long,
                8,
                Err(PasswordRule::TooLong {
                    max: MAX_PASSWORD_BYTES,
                }),
            ),
            ("tab\there!", 8, Err(PasswordRule::ControlCharacter)),
        ];
        for (pw, min, want) in table {
            assert_eq!(&check_rules(pw, *min), want, "{pw:?}");
        }
    }

    #[test]
    fn owasp_parameters_are_the_documented_ones() {
        let p = owasp_params();
        assert_eq!((p.m_cost(), p.t_cost(), p.p_cost()), (19_456, 2, 1));
    }

    #[test]
    fn hash_is_argon2id_phc_and_verifies() {
        let phc = hash_blocking("hunter22", light()).unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=64,t=1,p=1$"), "{phc}");
        assert!(verify_blocking(&phc, "hunter22").unwrap());
        assert!(!verify_blocking(&phc, "hunter23").unwrap());
        // A fresh salt each time: the same password never hashes to the same string.
        assert_ne!(phc, hash_blocking("hunter22", light()).unwrap());
    }

    #[tokio::test]
    async fn hasher_runs_off_the_runtime_and_closes() {
        let hasher = Hasher::new(1, light());
        let phc = hasher.hash("pw-pw-pw".into()).await.unwrap();
        assert!(hasher.verify(phc.clone(), "pw-pw-pw".into()).await.unwrap());
        hasher.close();
        assert!(matches!(
            hasher.verify(phc, "pw-pw-pw".into()).await,
            Err(AuthError::ShuttingDown)
        ));
    }
}
