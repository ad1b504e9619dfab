//! The Landlock ruleset of one child start: built in the parent with the
//! `landlock` crate ([`Prepared::build`]), entered between fork and exec
//! with raw system calls only ([`Enter::enter`]: no allocation, no lock).
//!
//! System calls: `landlock_create_ruleset(2)` (also the ABI probe, flag
//! `LANDLOCK_CREATE_RULESET_VERSION`), `landlock_add_rule(2)`
//! (`LANDLOCK_RULE_PATH_BENEATH`), `landlock_restrict_self(2)`,
//! `prctl(2)` `PR_SET_NO_NEW_PRIVS`, `close_range(2)` (Linux 5.11).

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    Access as _, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};

use super::{Access, Grant, SandboxError};

/// Why Landlock is unavailable on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// `ENOSYS`: the kernel was built without it.
    #[error("not built into this kernel (ENOSYS)")]
    NotBuilt,
    /// `EOPNOTSUPP`: built in, not enabled at boot (`lsm=`).
    #[error("not enabled at boot (EOPNOTSUPP; add landlock to the lsm= boot parameter)")]
    NotEnabled,
    /// `EPERM`: a seccomp filter refuses the call (systemd's
    /// `SystemCallFilter=` without the `landlock_*` calls).
    #[error("refused by a seccomp filter (EPERM; allow landlock_create_ruleset, landlock_add_rule and landlock_restrict_self in SystemCallFilter=)")]
    Filtered,
}

/// The running kernel's Landlock ABI version, probed once.
pub fn kernel_abi() -> Result<i32, Unavailable> {
    static ABI_VERSION: OnceLock<Result<i32, Unavailable>> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        // SAFETY: with a null attribute, size 0 and the VERSION flag the
        // call only returns the ABI version.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32, // LANDLOCK_CREATE_RULESET_VERSION
            )
        };
        if v > 0 {
            return Ok(i32::try_from(v).unwrap_or(i32::MAX));
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EOPNOTSUPP) => Err(Unavailable::NotEnabled),
            Some(libc::EPERM) => Err(Unavailable::Filtered),
            _ => Err(Unavailable::NotBuilt),
        }
    })
}

/// A child's sandbox, ready before the spawn: the ruleset's descriptor
/// (none when Landlock is off or missing) and whether `no_new_privs` is
/// set. Kept alive until the spawn returned.
pub struct Prepared {
    fd: Option<OwnedFd>,
    no_new_privs: bool,
    /// Granted paths that do not exist (skipped).
    pub missing: Vec<PathBuf>,
    /// Granted paths that, opened now, are or hold a protected path (a
    /// symlink planted since the config was checked, say): left out.
    pub escaped: Vec<PathBuf>,
}

impl Prepared {
    /// `sandbox = "off"`: no ruleset, no `no_new_privs`.
    pub fn off() -> Prepared {
        Prepared {
            fd: None,
            no_new_privs: false,
            missing: Vec::new(),
            escaped: Vec::new(),
        }
    }

    /// A ruleset handling every filesystem access of this kernel's ABI,
    /// TCP bind/connect when `!network` (ABI 4), signals and abstract
    /// sockets (scoped, ABI 6), granting `grants` (missing paths skipped).
    /// Each grant is checked where it was opened (the descriptor's own
    /// path, `/proc/self/fd/N`): one that `allowed` refuses is left out, so
    /// a symlink swapped in after the config was checked grants nothing.
    /// Without Landlock only `no_new_privs`.
    pub fn build(
        grants: &[Grant],
        network: bool,
        allowed: &dyn Fn(&Path) -> bool,
    ) -> Result<Prepared, SandboxError> {
        let Ok(version) = kernel_abi() else {
            return Ok(Prepared {
                fd: None,
                no_new_privs: true,
                missing: Vec::new(),
                escaped: Vec::new(),
            });
        };
        let err = |e: landlock::RulesetError| SandboxError::Ruleset(e.to_string());
        let abi = ABI::from(version);
        let mut rs = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(err)?;
        if !network {
            rs = rs
                .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
                .map_err(err)?;
        }
        rs = rs
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(err)?;
        let mut created = rs.create().map_err(err)?;
        let (mut missing, mut escaped) = (Vec::new(), Vec::new());
        for g in grants {
            let (Ok(fd), Ok(meta)) = (PathFd::new(&g.path), std::fs::metadata(&g.path)) else {
                missing.push(g.path.clone());
                continue;
            };
            let opened = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()));
            if !opened.is_ok_and(|real| allowed(&real)) {
                escaped.push(g.path.clone());
                continue;
            }
            let mut access = match g.access {
                Access::Read => AccessFs::from_read(abi),
                Access::Write => AccessFs::from_all(abi),
            };
            if !meta.is_dir() {
                access &= AccessFs::from_file(abi);
            }
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(err)?;
        }
        Ok(Prepared {
            fd: created.into(),
            no_new_privs: true,
            missing,
            escaped,
        })
    }

    /// True when a Landlock ruleset will be entered.
    pub fn landlocked(&self) -> bool {
        self.fd.is_some()
    }

    /// What the child runs between fork and exec (copied into the
    /// `pre_exec` closure; `self` must outlive the spawn).
    pub fn enter(&self) -> Enter {
        Enter {
            fd: self.fd.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            no_new_privs: self.no_new_privs,
        }
    }
}

/// `struct landlock_path_beneath_attr` (packed, `linux/landlock.h`).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR`.
const READ_FILE_DIR: u64 = (1 << 2) | (1 << 3);

/// The raw half of a [`Prepared`]: plain values, usable after fork.
#[derive(Clone, Copy, Debug)]
pub struct Enter {
    fd: RawFd,
    no_new_privs: bool,
}

impl Enter {
    /// Between fork and exec: `no_new_privs`, the child's own `/proc/<pid>`
    /// granted (read) and the ruleset entered, then every descriptor past
    /// stdio marked close-on-exec (not closed: std's exec-error pipe must
    /// live until the exec).
    ///
    /// # Safety
    /// Only in a `pre_exec` closure: raw system calls on plain values.
    pub unsafe fn enter(self) -> std::io::Result<()> {
        let fail = std::io::Error::last_os_error;
        // SAFETY (all blocks): async-signal-safe system calls on values and
        // a NUL-terminated static path; the attribute lives on the stack.
        if self.no_new_privs && unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(fail());
        }
        if self.fd >= 0 {
            let own = unsafe {
                libc::open(
                    c"/proc/self".as_ptr(),
                    libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY,
                )
            };
            if own >= 0 {
                let attr = PathBeneathAttr {
                    allowed_access: READ_FILE_DIR,
                    parent_fd: own,
                };
                let attr_ptr: *const PathBeneathAttr = &attr;
                // LANDLOCK_RULE_PATH_BENEATH = 1. A failure leaves the
                // child without its /proc entry, not without the sandbox.
                unsafe {
                    libc::syscall(libc::SYS_landlock_add_rule, self.fd, 1, attr_ptr, 0);
                    libc::close(own);
                }
            }
            if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, self.fd, 0) } != 0 {
                return Err(fail());
            }
        }
        // Older kernels (ENOSYS, EINVAL): descriptors are opened
        // close-on-exec throughout mcp-edge (std and tokio do so).
        unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
        }
        Ok(())
    }
}
